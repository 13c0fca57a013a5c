"""``python -m tests.support.paused_delivery relay | consume NAME``: a role stopped in its window.

The relay or bus consumer is the one ``pin-sessions relay`` or ``consume NAME`` runs, built
and run by the same functions from settings loaded the same way; only its database is
wrapped. The statement that records its progress (the relay marking rows sent, the bus
consumer moving its position) never runs: the process writes :data:`PAUSED` on stderr and
waits to be killed, inside the window between the effect and its bookkeeping.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, cast

from pin_sessions.bootstrap.database import build_runtime, database_endpoint
from pin_sessions.cli import build_parser
from pin_sessions.cli.messaging import delivery_role, run_role
from pin_sessions.platform.database import Connection, Database
from pin_sessions.platform.logging import configure_logging
from pin_sessions.platform.messaging import pgbus, relay
from pin_sessions.settings import load_settings

PAUSED = "paused before recording progress"
PROGRESS_STATEMENTS = frozenset({relay.MARK_SENT, pgbus.UPSERT_POSITION})


class _PausingConnection:
    """A pooled connection whose progress statements wait forever instead of running."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)

    async def execute(self, query: str, *args: Any, timeout: float | None = None) -> str:
        if query in PROGRESS_STATEMENTS:
            print(PAUSED, file=sys.stderr, flush=True)
            await asyncio.Event().wait()  # until the test kills the process
        status: str = await self._conn.execute(query, *args, timeout=timeout)
        return status


class PausingDatabase(Database):
    """A worker pool, except that recording progress never completes."""

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[Connection]:
        async with super().connection() as conn:
            yield cast("Connection", _PausingConnection(conn))


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    if args.command not in ("relay", "consume"):
        raise SystemExit(f"{args.command}: only relay and consume have a progress window")
    settings = load_settings(os.environ)
    configure_logging(settings.log_level)
    with database_endpoint(settings) as dsn:
        runtime = build_runtime(
            settings, dsn, database=PausingDatabase(dsn, max_size=settings.database.worker_pool_max)
        )
        asyncio.run(run_role(runtime, delivery_role(runtime, args)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

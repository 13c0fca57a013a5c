"""``pin-sessions migrate``: apply pending migrations and print which."""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING

from pin_sessions.bootstrap.database import build_runtime, database_endpoint, worker_database
from pin_sessions.cli.common import add_command
from pin_sessions.platform.migrations import migrate

if TYPE_CHECKING:
    import argparse

    from pin_sessions.cli.common import Commands
    from pin_sessions.settings import Settings


def add_parsers(commands: Commands) -> None:
    migrate_parser = add_command(commands, "migrate", "apply schema migrations (idempotent)")
    migrate_parser.set_defaults(run=run)


def run(settings: Settings, args: argparse.Namespace) -> int:
    async def apply(dsn: str) -> list[int]:
        runtime = build_runtime(settings, dsn, database=worker_database(settings, dsn, max_size=1))
        await runtime.database.open()
        try:
            async with runtime.database.connection() as conn:
                return await migrate(conn)
        finally:
            await runtime.database.close()

    # `migrate` reports what it applied, so the endpoint must not migrate before it.
    with database_endpoint(settings, migrate_embedded=False) as dsn:
        applied = asyncio.run(apply(dsn))
    print(json.dumps({"applied": applied}))
    return 0

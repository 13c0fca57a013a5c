"""A PostgreSQL of a test's own, to freeze: SIGSTOP to the postmaster and every backend.

Freezing the shared per-run server would stall every other test, so a stall test starts
its own (``own_postgres``), migrated, and freezes that one (``frozen``) the way a host
that stops answering would: connections stay open, nothing comes back. ``backends_freezer``
stops single backends instead: a stopped backend's statement neither ends nor
acknowledges a cancel request, while the postmaster still takes one.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import asyncpg
import psutil

from pin_sessions.platform.embedded import EmbeddedPostgres
from pin_sessions.platform.migrations import migrate


@contextmanager
def own_postgres(workdir: Path) -> Iterator[tuple[str, EmbeddedPostgres]]:
    """A migrated embedded server for this test alone: its DSN and the server."""
    embedded = EmbeddedPostgres(workdir / "pg", delete_on_stop=True)
    dsn = embedded.start()
    try:
        asyncio.run(_migrate(dsn))
        yield dsn, embedded
    finally:
        embedded.stop()


async def _migrate(dsn: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await migrate(conn)
    finally:
        await conn.close()


def postgres_processes(embedded: EmbeddedPostgres) -> list[psutil.Process]:
    postmaster = psutil.Process(int((embedded.pgdata / "postmaster.pid").read_text().split()[0]))
    return [postmaster, *postmaster.children(recursive=True)]


@contextmanager
def frozen(embedded: EmbeddedPostgres) -> Iterator[None]:
    """The server stopped dead for the block (every process of it), then let go."""
    processes = postgres_processes(embedded)
    for process in processes:
        os.kill(process.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for process in processes:
            os.kill(process.pid, signal.SIGCONT)


@contextmanager
def backends_freezer() -> Iterator[Callable[[int], None]]:
    """``freeze(pid)`` stops one backend (of a test's own server); every one it stopped is
    let go when the block ends, however it ends."""
    stopped: list[int] = []

    def freeze(pid: int) -> None:
        os.kill(pid, signal.SIGSTOP)
        stopped.append(pid)

    try:
        yield freeze
    finally:
        for pid in stopped:
            os.kill(pid, signal.SIGCONT)

"""The embedded server's own options (SPEC §11): WAL compression on, kept across restarts."""

from __future__ import annotations

import asyncio
from pathlib import Path

import asyncpg

from pin_sessions.platform.embedded import WAL_COMPRESSION_METHODS, EmbeddedPostgres
from tests.support.waiting import wait_until

# Where the running server took its value from.
SOURCE = "select source, sourcefile from pg_settings where name = 'wal_compression'"


async def _show(dsn: str, query: str) -> asyncpg.Record:
    conn = await asyncpg.connect(dsn)
    try:
        row = await conn.fetchrow(query)
        assert row is not None
        return row
    finally:
        await conn.close()


async def _best_known(dsn: str) -> str:
    """The first of our methods this build of the server knows (pglz at least)."""
    known = (await _show(dsn, "select enumvals from pg_settings where name = 'wal_compression'"))[0]
    return next(method for method in WAL_COMPRESSION_METHODS if method in known)


async def _compression(dsn: str) -> str:
    setting: str = (await _show(dsn, "show wal_compression"))[0]
    return setting


def test_the_embedded_server_compresses_wal_with_the_best_method_it_knows(tmp_path: Path) -> None:
    embedded = EmbeddedPostgres(tmp_path / "pg", delete_on_stop=True)
    dsn = embedded.start()
    try:
        best = asyncio.run(_best_known(dsn))

        async def compressed() -> bool:
            return await _compression(dsn) == best

        # The reload that applies it reaches every backend within moments.
        asyncio.run(wait_until(compressed, timeout=10))
        # Set with ALTER SYSTEM: the server reads it from postgresql.auto.conf, so a restart
        # (the postmaster watch's pg_ctl start, which sets nothing) keeps it.
        source, sourcefile = asyncio.run(_show(dsn, SOURCE))
        assert (source, Path(sourcefile).name) == ("configuration file", "postgresql.auto.conf")
    finally:
        embedded.stop()

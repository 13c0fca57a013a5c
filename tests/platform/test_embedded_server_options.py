"""The embedded server's own options (SPEC §11): WAL compression on, kept across restarts."""

from __future__ import annotations

import asyncio
from pathlib import Path

import asyncpg

from pin_sessions.platform.embedded import WAL_COMPRESSION_METHODS, EmbeddedPostgres
from tests.support.waiting import wait_until


async def _compression(dsn: str) -> tuple[str, list[str]]:
    conn = await asyncpg.connect(dsn)
    try:
        row = await conn.fetchrow(
            "select setting, enumvals from pg_settings where name = 'wal_compression'"
        )
        assert row is not None
        return row["setting"], row["enumvals"]
    finally:
        await conn.close()


def test_the_embedded_server_compresses_wal_with_the_best_method_it_knows(tmp_path: Path) -> None:
    embedded = EmbeddedPostgres(tmp_path / "pg", delete_on_stop=True)
    dsn = embedded.start()
    try:
        _, known = asyncio.run(_compression(dsn))
        best = next(method for method in WAL_COMPRESSION_METHODS if method in known)

        async def compressed() -> bool:
            return (await _compression(dsn))[0] == best

        # The reload that applies it reaches every backend within moments.
        asyncio.run(wait_until(compressed, timeout=10))
        # Written to postgresql.auto.conf, so a restarted server has it from its start.
        assert (
            f"wal_compression = '{best}'" in (embedded.pgdata / "postgresql.auto.conf").read_text()
        )
    finally:
        embedded.stop()

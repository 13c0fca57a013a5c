"""Numbered, forward-only SQL migrations.

Files ``pin_sessions/migrations/NNNN_name.sql`` are applied in order, each in its own
transaction, under a session advisory lock so that two processes migrating at once
apply every file exactly once. ``public.schema_migrations`` records what ran.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources

import structlog

from pin_sessions.platform.database import Connection

log = structlog.get_logger(__name__)

# Any fixed 64-bit key; it only has to be the same in every process of this service.
MIGRATION_LOCK_KEY = 0x50494E5F4D494752  # "PIN_MIGR"

_FILE_NAME = re.compile(r"^(?P<version>\d{4})_(?P<name>[a-z0-9_]+)\.sql$")

CREATE_LEDGER = """
create table if not exists public.schema_migrations (
    version int primary key,
    name text not null,
    applied_at timestamptz not null default now()
)
"""

SELECT_APPLIED = "select version from public.schema_migrations order by version"

INSERT_APPLIED = "insert into public.schema_migrations (version, name) values ($1, $2)"

SELECT_LEDGER_EXISTS = "select to_regclass('public.schema_migrations') is not null"


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str


def available_migrations() -> list[Migration]:
    """Every migration file shipped in the package, in version order."""
    found = []
    for entry in resources.files("pin_sessions.migrations").iterdir():
        match = _FILE_NAME.match(entry.name)
        if match is None:
            continue
        found.append(
            Migration(int(match["version"]), match["name"], entry.read_text(encoding="utf-8"))
        )
    found.sort(key=lambda migration: migration.version)
    versions = [migration.version for migration in found]
    if len(set(versions)) != len(versions):
        raise RuntimeError(f"duplicate migration versions: {versions}")
    return found


async def applied_versions(conn: Connection) -> set[int]:
    if not await conn.fetchval(SELECT_LEDGER_EXISTS):
        return set()
    return {row["version"] for row in await conn.fetch(SELECT_APPLIED)}


async def pending_migrations(conn: Connection) -> list[Migration]:
    done = await applied_versions(conn)
    return [migration for migration in available_migrations() if migration.version not in done]


async def migrate(conn: Connection) -> list[int]:
    """Apply what is pending; returns the versions this call applied (empty when current)."""
    await conn.execute("select pg_advisory_lock($1)", MIGRATION_LOCK_KEY)
    try:
        await conn.execute(CREATE_LEDGER)
        applied = []
        for migration in await pending_migrations(conn):
            async with conn.transaction():
                await conn.execute(migration.sql)
                await conn.execute(INSERT_APPLIED, migration.version, migration.name)
            log.info("migration applied", version=migration.version, name=migration.name)
            applied.append(migration.version)
        return applied
    finally:
        await conn.execute("select pg_advisory_unlock($1)", MIGRATION_LOCK_KEY)

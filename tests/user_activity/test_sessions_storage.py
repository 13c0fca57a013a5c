"""The sessions table's storage (SPEC §11): room on its pages, its own autovacuum settings,
set by a migration that heartbeats never wait for."""

from __future__ import annotations

import asyncpg

from pin_sessions.platform.migrations import available_migrations
from pin_sessions.user_activity.repository import extend_sessions
from tests.conftest import T0

STORAGE_MIGRATION = "sessions_storage"

# Heartbeats' bound on a lock wait in this test: one that waited longer fails at once.
LOCK_TIMEOUT = "1s"

SEED = """
insert into user_activity.sessions
    (id, anonymous_id, status, created_at, last_activity_at, device_user_agent, device_type)
select gen_random_uuid(), gen_random_uuid(), 'Active', $1, $1, 'ua', 'Desktop'
from generate_series(1, 2000)
"""

# What the migration's transaction holds on the table and its indexes.
LOCKS = """
select c.relname, l.mode from pg_locks as l join pg_class as c on c.oid = l.relation
where l.pid = $1 and l.granted
  and (c.oid = 'user_activity.sessions'::regclass
       or c.oid in (select indexrelid from pg_index
                    where indrelid = 'user_activity.sessions'::regclass))
"""


async def test_the_sessions_table_carries_its_storage_parameters(database_url: str) -> None:
    conn = await asyncpg.connect(database_url)
    try:
        options = await conn.fetchval(
            "select reloptions from pg_class where oid = 'user_activity.sessions'::regclass"
        )
    finally:
        await conn.close()
    assert dict(option.split("=", 1) for option in options) == {
        "fillfactor": "80",
        "autovacuum_vacuum_scale_factor": "0",
        "autovacuum_vacuum_threshold": "50000",
        "autovacuum_vacuum_insert_scale_factor": "0",
        "autovacuum_vacuum_insert_threshold": "50000",
        "autovacuum_vacuum_cost_limit": "1000",
        "autovacuum_vacuum_cost_delay": "2",
    }


async def test_heartbeats_go_on_while_the_storage_migration_holds_its_lock(
    database_url: str,
) -> None:
    """The migration's statement, run again on a populated table in a transaction held
    open: it takes SHARE UPDATE EXCLUSIVE and nothing stronger, rewrites nothing, and a
    heartbeat batch meanwhile is answered without waiting for it."""
    migration = next(m for m in available_migrations() if m.name == STORAGE_MIGRATION)
    migrating = await asyncpg.connect(database_url)
    heartbeat = await asyncpg.connect(database_url, server_settings={"lock_timeout": LOCK_TIMEOUT})
    try:
        await migrating.execute(SEED, T0)
        devices = [row[0] for row in await migrating.fetch(
            "select anonymous_id from user_activity.sessions limit 50"
        )]  # fmt: skip
        filenode = await migrating.fetchval("select pg_relation_filenode('user_activity.sessions')")
        async with migrating.transaction():
            await migrating.execute(migration.sql)
            locks = await migrating.fetch(LOCKS, migrating.get_server_pid())

            extended, locked = await extend_sessions(heartbeat, dict.fromkeys(devices, T0))

            assert {(row["relname"], row["mode"]) for row in locks} == {
                ("sessions", "ShareUpdateExclusiveLock")
            }
            assert sorted(extended) == sorted(devices)
            assert locked == []
        assert filenode == await migrating.fetchval(
            "select pg_relation_filenode('user_activity.sessions')"
        )
    finally:
        await heartbeat.close()
        await migrating.close()

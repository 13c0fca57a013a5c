"""The sessions table's storage (SPEC §11): room on its pages, its own autovacuum settings,
the seed's indexes as seed 003 defines them, set by a migration that heartbeats never wait for."""

from __future__ import annotations

from datetime import timedelta

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

# Rows of production size: a real browser's user agent and device columns.
USER_AGENT = (
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/138.0.0.0 Safari/537.36"
)
SEED_BROWSERS = """
insert into user_activity.sessions
    (id, anonymous_id, status, created_at, last_activity_at,
     device_user_agent, device_type, device_os, device_browser, device_ip)
select gen_random_uuid(), gen_random_uuid(), 'Active', $1, $1,
       $2, 'Desktop', 'Windows 10', 'Chrome 138', '203.0.113.' || (i % 256)
from generate_series(1, 1000) as i
"""
# One device on every heap page the seed filled (the last page, never full, left out), with
# the page its row is on.
ONE_DEVICE_PER_FULL_PAGE = """
select distinct on (page) anonymous_id, page
from (select anonymous_id, (ctid::text::point)[0]::int as page
      from user_activity.sessions) as rows
where page < (select max((ctid::text::point)[0])::int from user_activity.sessions)
order by page, anonymous_id
"""
PAGES_OF = """
select anonymous_id, (ctid::text::point)[0]::int as page
from user_activity.sessions where anonymous_id = any($1::uuid[]) and status = 'Active'
"""

# Every index of the table, as PostgreSQL prints its definition back: the columns, the
# predicate, and any storage parameter of the index itself (``WITH (...)``) would show.
INDEX_DEFINITIONS = """
select indexname, indexdef from pg_indexes
where schemaname = 'user_activity' and tablename = 'sessions'
"""
SEED_003_INDEXES = {
    "sessions_pkey": "CREATE UNIQUE INDEX sessions_pkey ON user_activity.sessions USING btree (id)",
    "ux_sessions_active_anonymous": "CREATE UNIQUE INDEX ux_sessions_active_anonymous "
    "ON user_activity.sessions USING btree (anonymous_id) "
    "WHERE ((status)::text = 'Active'::text)",
    "ix_sessions_anonymous_id": "CREATE INDEX ix_sessions_anonymous_id "
    "ON user_activity.sessions USING btree (anonymous_id, created_at DESC)",
    "ix_sessions_user_id": "CREATE INDEX ix_sessions_user_id "
    "ON user_activity.sessions USING btree (user_id) WHERE (user_id IS NOT NULL)",
    "ix_sessions_active_last_activity": "CREATE INDEX ix_sessions_active_last_activity "
    "ON user_activity.sessions USING btree (last_activity_at) "
    "WHERE ((status)::text = 'Active'::text)",
}
# Ours (migration 0007, for the retention job), beside the seed's.
OUR_INDEXES = {
    "ix_sessions_retention_created_at": "CREATE INDEX ix_sessions_retention_created_at "
    "ON user_activity.sessions USING btree (created_at) "
    "WHERE ((status)::text = 'Inactive'::text)",
}

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
    assert dict(option.split("=", 1) for option in options or []) == {
        "fillfactor": "80",
        "autovacuum_vacuum_scale_factor": "0",
        "autovacuum_vacuum_threshold": "50000",
        "autovacuum_vacuum_insert_scale_factor": "0",
        "autovacuum_vacuum_insert_threshold": "50000",
        "autovacuum_vacuum_cost_limit": "1000",
        "autovacuum_vacuum_cost_delay": "2",
    }


async def test_a_heartbeat_leaves_the_new_row_version_on_its_page(database_url: str) -> None:
    """Seed 003's index on last_activity_at makes every heartbeat a non-HOT update; the room
    the fillfactor leaves still keeps the new version on the page of the old one, so the
    table does not spread over new pages. On pages filled to the brim (fillfactor 100) a
    heartbeat's version must move to another page."""
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute(SEED_BROWSERS, T0, USER_AGENT)
        before = {device: page for device, page in await conn.fetch(ONE_DEVICE_PER_FULL_PAGE)}
        assert len(before) >= 10, before  # the seed fills pages, not one

        extended, locked = await extend_sessions(
            conn, dict.fromkeys(before, T0 + timedelta(minutes=1))
        )

        assert sorted(extended) == sorted(before) and locked == []
        after = {device: page for device, page in await conn.fetch(PAGES_OF, list(before))}
        assert after == before
    finally:
        await conn.close()


async def test_the_seed_indexes_stay_as_seed_003_defines_them(database_url: str) -> None:
    """The storage settings are the table's; its indexes, ix_sessions_active_last_activity
    included, are exactly the seed's (and our retention index): none added, dropped, changed
    or given storage parameters of its own."""
    conn = await asyncpg.connect(database_url)
    try:
        rows = await conn.fetch(INDEX_DEFINITIONS)
    finally:
        await conn.close()
    assert {row["indexname"]: row["indexdef"] for row in rows} == SEED_003_INDEXES | OUR_INDEXES


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

"""Migration 0003 builds the Session table exactly as seed 003 names it."""

from __future__ import annotations

import asyncpg
import pytest

from pin_sessions.platform.ids import new_id
from pin_sessions.platform.runtime import Runtime
from tests.conftest import T0


async def _fetch(runtime: Runtime, query: str, *args: object) -> list[asyncpg.Record]:
    async with runtime.database.connection() as conn:
        return list(await conn.fetch(query, *args))


async def test_sessions_columns_have_the_seed_types(runtime: Runtime) -> None:
    rows = await _fetch(
        runtime,
        "select column_name, data_type, character_maximum_length, is_nullable "
        "from information_schema.columns "
        "where table_schema = 'user_activity' and table_name = 'sessions'",
    )
    columns = {row["column_name"]: tuple(row)[1:] for row in rows}
    assert columns == {
        "id": ("uuid", None, "NO"),
        "anonymous_id": ("uuid", None, "NO"),
        "user_id": ("uuid", None, "YES"),
        "linked_at": ("timestamp with time zone", None, "YES"),
        "signed_in_at": ("timestamp with time zone", None, "YES"),
        "status": ("character varying", 16, "NO"),
        "created_at": ("timestamp with time zone", None, "NO"),
        "last_activity_at": ("timestamp with time zone", None, "NO"),
        "ended_at": ("timestamp with time zone", None, "YES"),
        "duration": ("interval", None, "YES"),
        "device_user_agent": ("character varying", 1024, "NO"),
        "device_type": ("character varying", 16, "NO"),
        "device_os": ("character varying", 128, "YES"),
        "device_browser": ("character varying", 128, "YES"),
        "device_ip": ("character varying", 45, "YES"),
    }


async def test_sessions_indexes_carry_the_seed_names_and_predicates(runtime: Runtime) -> None:
    rows = await _fetch(
        runtime,
        "select indexname, indexdef from pg_indexes "
        "where schemaname = 'user_activity' and tablename = 'sessions'",
    )
    definitions = {row["indexname"]: row["indexdef"] for row in rows}
    assert definitions["ux_sessions_active_anonymous"].startswith("CREATE UNIQUE INDEX")
    assert (
        "(anonymous_id) WHERE ((status)::text = 'Active'::text)"
        in (definitions["ux_sessions_active_anonymous"])
    )
    assert "(anonymous_id, created_at DESC)" in definitions["ix_sessions_anonymous_id"]
    assert "(user_id) WHERE (user_id IS NOT NULL)" in definitions["ix_sessions_user_id"]
    assert (
        "(last_activity_at) WHERE ((status)::text = 'Active'::text)"
        in (definitions["ix_sessions_active_last_activity"])
    )


async def test_the_link_pair_and_duration_checks_exist(runtime: Runtime) -> None:
    rows = await _fetch(
        runtime,
        "select conname, pg_get_constraintdef(oid) as definition from pg_constraint "
        "where conrelid = 'user_activity.sessions'::regclass and contype = 'c'",
    )
    checks = {row["conname"]: row["definition"] for row in rows}
    assert "(user_id IS NULL) = (linked_at IS NULL)" in checks["chk_sessions_link_pair"]
    assert "(user_id IS NULL) = (signed_in_at IS NULL)" in checks["chk_sessions_sign_in_pair"]
    assert "duration >= '00:00:00'::interval" in checks["chk_sessions_duration_nonneg"]


INSERT = """
insert into user_activity.sessions
    (id, anonymous_id, user_id, linked_at, signed_in_at, status, created_at, last_activity_at,
     duration, device_user_agent, device_type)
values ($1, $2, $3, $4, $8, $5, $6, $6, $7, 'ua', 'Unknown')
"""


async def test_a_user_without_linked_at_is_refused(runtime: Runtime) -> None:
    async with runtime.database.connection() as conn:
        with pytest.raises(asyncpg.CheckViolationError, match="chk_sessions_link_pair"):
            await conn.execute(INSERT, new_id(), new_id(), new_id(), None, "Active", T0, None, T0)


async def test_a_user_without_the_instant_of_its_sign_in_is_refused(runtime: Runtime) -> None:
    async with runtime.database.connection() as conn:
        with pytest.raises(asyncpg.CheckViolationError, match="chk_sessions_sign_in_pair"):
            await conn.execute(INSERT, new_id(), new_id(), new_id(), T0, "Active", T0, None, None)


async def test_a_negative_duration_is_refused(runtime: Runtime) -> None:
    async with runtime.database.connection() as conn:
        with pytest.raises(asyncpg.CheckViolationError, match="chk_sessions_duration_nonneg"):
            await conn.execute(
                INSERT, new_id(), new_id(), None, None, "Inactive", T0, -T0.resolution, None
            )


async def test_children_reference_sessions_with_restrict(runtime: Runtime) -> None:
    rows = await _fetch(
        runtime,
        "select conrelid::regclass::text as child, confdeltype::text from pg_constraint "
        "where confrelid = 'user_activity.sessions'::regclass and contype = 'f'",
    )
    assert {(row["child"], row["confdeltype"]) for row in rows} == {
        ("user_activity.property_object_views", "r"),
        ("user_activity.action_events", "r"),
    }

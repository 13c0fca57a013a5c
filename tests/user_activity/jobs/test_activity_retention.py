"""ActivityRetentionJob: what it deletes, in which order, what it never deletes."""

from __future__ import annotations

from datetime import timedelta

import asyncpg
import pytest
from prometheus_client import CollectorRegistry

from pin_sessions.platform.runtime import Runtime
from pin_sessions.user_activity.repository.loaded import QUERIES
from tests.user_activity.jobs.rows import insert_actions, insert_sessions, insert_views
from tests.user_activity.jobs.support import retain_once

DAY = timedelta(days=1)
DELETED_TOTAL = "user_activity_activity_retention_deleted_total"

COUNT_ROWS = """
select (select count(*) from user_activity.sessions where id = any($1)) as sessions,
       (select count(*) from user_activity.property_object_views where session_id = any($1))
           as views,
       (select count(*) from user_activity.action_events where session_id = any($1)) as actions
"""

SELECT_FOREIGN_KEY_ACTIONS = """
select conrelid::regclass::text as child, confdeltype::text as confdeltype
from pg_constraint
where contype = 'f' and confrelid = 'user_activity.sessions'::regclass
"""


async def _counts(runtime: Runtime, ids: list[object]) -> tuple[int, int, int]:
    async with runtime.database.connection() as conn:
        row = await conn.fetchrow(COUNT_ROWS, ids)
    assert row is not None
    return row["sessions"], row["views"], row["actions"]


async def test_old_inactive_sessions_go_with_their_children_and_active_never(
    runtime: Runtime, registry: CollectorRegistry
) -> None:
    now = runtime.clock.now()
    old, recent = now - 400 * DAY, now - 100 * DAY
    async with runtime.database.connection() as conn:
        retired = await insert_sessions(
            conn, count=4, created_at=old, last_activity_at=old, status="Inactive"
        )
        kept_inactive = await insert_sessions(
            conn, count=2, created_at=recent, last_activity_at=recent, status="Inactive"
        )
        # Active for over a year (the closer has not run): retention never touches it.
        ancient_active = await insert_sessions(
            conn, count=2, created_at=old, last_activity_at=old, status="Active"
        )
        everyone = retired + kept_inactive + ancient_active
        await insert_views(conn, everyone, started_at=old, ended_at=old)
        await insert_actions(conn, everyone, created_at=old)
        await insert_actions(conn, retired, created_at=old)

    result = await retain_once(runtime, registry)

    assert result.succeeded
    assert result.phases["delete"].counts == {
        "sessions": 4,
        "property_object_views": 4,
        "action_events": 8,
    }
    assert await _counts(runtime, list(retired)) == (0, 0, 0)
    assert await _counts(runtime, list(kept_inactive)) == (2, 2, 2)
    assert await _counts(runtime, list(ancient_active)) == (2, 2, 2)
    for table, count in result.phases["delete"].counts.items():
        assert registry.get_sample_value(DELETED_TOTAL, {"table": table}) == count


async def test_the_retention_age_is_measured_from_the_creation_of_the_session(
    runtime: Runtime, registry: CollectorRegistry
) -> None:
    now = runtime.clock.now()
    async with runtime.database.connection() as conn:
        # Created over a year ago, ended within it: old all the same.
        [long_session] = await insert_sessions(
            conn,
            count=1,
            created_at=now - 400 * DAY,
            last_activity_at=now - 300 * DAY,
            status="Inactive",
        )
        # Created exactly a year ago: not older than the age yet.
        [year_old] = await insert_sessions(
            conn,
            count=1,
            created_at=now - 365 * DAY,
            last_activity_at=now - 365 * DAY,
            status="Inactive",
        )

    result = await retain_once(runtime, registry)

    assert result.count("sessionsDeleted") == 1
    assert await _counts(runtime, [long_session]) == (0, 0, 0)
    assert await _counts(runtime, [year_old]) == (1, 0, 0)


async def test_retention_deletes_in_bounded_batches(
    runtime: Runtime, registry: CollectorRegistry
) -> None:
    now = runtime.clock.now()
    old = now - 400 * DAY
    async with runtime.database.connection() as conn:
        ids = await insert_sessions(
            conn, count=25, created_at=old, last_activity_at=old, status="Inactive"
        )
        await insert_actions(conn, ids, created_at=old)

    result = await retain_once(runtime, registry, batch_size=10)

    assert (
        result.count("sessionsDeleted"),
        result.phases["delete"].progress.batches,
        result.phases["delete"].progress.largest_batch,
    ) == (25, 3, 10)
    assert await _counts(runtime, list(ids)) == (0, 0, 0)


async def test_a_spent_run_budget_ends_the_run_between_batches(
    runtime: Runtime, registry: CollectorRegistry
) -> None:
    now = runtime.clock.now()
    old = now - 400 * DAY
    async with runtime.database.connection() as conn:
        ids = await insert_sessions(
            conn, count=25, created_at=old, last_activity_at=old, status="Inactive"
        )

    result = await retain_once(
        runtime, registry, batch_size=10, max_run_duration=timedelta(microseconds=1)
    )

    assert result.succeeded
    assert (result.count("sessionsDeleted"), result.phases["delete"].progress.batches) == (10, 1)
    assert await _counts(runtime, list(ids)) == (15, 0, 0)


async def test_the_children_keep_restricting_the_deletion_of_their_session(
    runtime: Runtime,
) -> None:
    """The job deletes children first because the keys RESTRICT; they must stay so."""
    now = runtime.clock.now()
    async with runtime.database.connection() as conn:
        keys = await conn.fetch(SELECT_FOREIGN_KEY_ACTIONS)
        [session_id] = await insert_sessions(
            conn, count=1, created_at=now, last_activity_at=now, status="Inactive"
        )
        await insert_actions(conn, [session_id], created_at=now)
        with pytest.raises(asyncpg.RestrictViolationError):
            await conn.execute("delete from user_activity.sessions where id = $1", session_id)
    assert sorted((row["child"], row["confdeltype"]) for row in keys) == [
        ("user_activity.action_events", "r"),
        ("user_activity.property_object_views", "r"),
    ]


async def test_an_empty_table_is_a_no_op_success(
    runtime: Runtime, registry: CollectorRegistry
) -> None:
    result = await retain_once(runtime, registry)

    assert result.succeeded
    assert result.to_json() == {
        "jobRunId": str(result.job_run_id),
        "sessionsDeleted": 0,
        "actionEventsDeleted": 0,
        "propertyObjectViewsDeleted": 0,
        "idempotencyKeysDeleted": 0,
        "durationMs": result.duration_ms,
    }
    assert registry.get_sample_value(
        "user_activity_activity_retention_last_success_timestamp_seconds"
    ) == (runtime.clock.now().timestamp())


async def test_the_claim_goes_through_the_retention_index(runtime: Runtime) -> None:
    claim = QUERIES.claim_retired_sessions
    async with runtime.database.transaction() as conn:
        await conn.execute("set local enable_seqscan = off")
        plan = "\n".join(
            row[0]
            for row in await conn.fetch(
                f"explain {claim.text}",
                *claim.args(created_before=runtime.clock.now(), batch_size=1000),
            )
        )
    assert "ix_sessions_retention_created_at" in plan and "Sort" not in plan, plan


async def test_the_retention_index_holds_inactive_sessions_by_creation(runtime: Runtime) -> None:
    async with runtime.database.connection() as conn:
        rows = await conn.fetch(
            "select indexname, indexdef from pg_indexes "
            "where schemaname = 'user_activity' and tablename = 'sessions'"
        )
    indexes = {row["indexname"]: row["indexdef"] for row in rows}
    assert "ix_sessions_retention_ended_at" not in indexes
    assert (
        "(created_at) WHERE ((status)::text = 'Inactive'::text)"
        in indexes["ix_sessions_retention_created_at"]
    )


async def test_idempotency_keys_past_their_24_hours_are_deleted_and_newer_ones_kept(
    runtime: Runtime, registry: CollectorRegistry
) -> None:
    now = runtime.clock.now()
    insert = """
        insert into user_activity.idempotency_keys
            (anonymous_id, key, request_hash, created_at, response)
        select gen_random_uuid(), 'k', '\\x00', $1, '{}'::jsonb from generate_series(1, $2)
    """
    async with runtime.database.connection() as conn:
        await conn.execute(insert, now - timedelta(hours=24, seconds=1), 3)
        await conn.execute(insert, now - timedelta(hours=23), 2)

    result = await retain_once(runtime, registry)

    assert result.succeeded
    assert result.count("idempotencyKeysDeleted") == 3
    assert result.to_json()["idempotencyKeysDeleted"] == 3
    async with runtime.database.connection() as conn:
        assert await conn.fetchval("select count(*) from user_activity.idempotency_keys") == 2
    assert registry.get_sample_value(DELETED_TOTAL, {"table": "idempotency_keys"}) == 3


async def test_anonymous_ids_issued_to_starts_expire_with_the_other_keys(
    runtime: Runtime, registry: CollectorRegistry
) -> None:
    """A first start's key answers repeats for 24 hours; then it goes with the others."""
    now = runtime.clock.now()
    insert = """
        insert into user_activity.issued_anonymous_ids (key, anonymous_id, created_at)
        select 'k' || n || $3, gen_random_uuid(), $1 from generate_series(1, $2) as n
    """
    async with runtime.database.connection() as conn:
        await conn.execute(insert, now - timedelta(hours=24, seconds=1), 4, "old")
        await conn.execute(insert, now - timedelta(hours=23), 1, "new")

    result = await retain_once(runtime, registry)

    assert result.count("idempotencyKeysDeleted") == 4
    async with runtime.database.connection() as conn:
        kept = await conn.fetch("select key from user_activity.issued_anonymous_ids")
    assert [row["key"] for row in kept] == ["k1new"]

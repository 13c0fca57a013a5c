"""The user-activity jobs as real OS processes: parallel closers racing link's
force-close, ``--once`` output, and ``up`` serving the jobs' metrics."""

from __future__ import annotations

import asyncio
import json
import subprocess
import uuid
from datetime import UTC, datetime, timedelta

import asyncpg

from pin_sessions.platform.database import Database
from pin_sessions.platform.devices import DeviceType
from pin_sessions.platform.ids import new_id
from pin_sessions.platform.runtime import Runtime
from pin_sessions.user_activity import linking
from pin_sessions.user_activity.domain import DeviceInfo, SignedInCaller
from tests.support.processes import (
    communicate,
    metrics_of_up,
    pin_sessions,
)
from tests.user_activity.jobs.rows import (
    insert_actions,
    insert_sessions,
    insert_views,
    session_ended_counts,
)
from tests.user_activity.jobs.support import wait_for_lock_waiters

GUEST_SESSIONS = 4000
LINKED_SESSIONS = 300
FRESH_SESSIONS = 500
DESKTOP = DeviceInfo("test-agent", DeviceType.DESKTOP, None, None, None)
CLOSER_OUTPUT = {"jobRunId", "closed", "viewsClosed", "durationMs", "backlogRemaining"}


def _once_output(process: subprocess.Popen[str], out: str, err: str) -> dict[str, object]:
    assert process.returncode == 0, err[-3000:]
    lines = out.splitlines()
    assert len(lines) == 1, out
    result: dict[str, object] = json.loads(lines[0])
    return result


async def _seed(runtime: Runtime, user_a: uuid.UUID) -> tuple[set[str], list[uuid.UUID]]:
    """Idle guest and linked sessions with an open view each, among fresh ones.

    The processes read the wall clock, so the idle ones were last active an hour before it.
    """
    now = datetime.now(UTC)
    idle, created = now - timedelta(hours=1), now - timedelta(hours=2)
    async with runtime.database.connection() as conn:
        guests = await insert_sessions(
            conn, count=GUEST_SESSIONS, created_at=created, last_activity_at=idle
        )
        linked = await insert_sessions(
            conn, count=LINKED_SESSIONS, created_at=created, last_activity_at=idle, user_id=user_a
        )
        await insert_views(conn, guests + linked, started_at=created)
        await insert_sessions(conn, count=FRESH_SESSIONS, created_at=now, last_activity_at=now)
        devices = await conn.fetch(
            "select anonymous_id from user_activity.sessions where id = any($1)", linked
        )
    return {str(session_id) for session_id in guests + linked}, [
        row["anonymous_id"] for row in devices
    ]


async def test_two_closer_processes_and_link_force_close_end_every_session_exactly_once(
    runtime: Runtime, database_url: str, settings_env: dict[str, str]
) -> None:
    user_a, user_b = new_id(), new_id()
    idle_ids, linked_devices = await _seed(runtime, user_a)
    env = {**settings_env, "PIN_ACTIVITY_CLOSER__BATCH_SIZE": "50"}
    # A share lock on the sessions holds both closers inside their first batch, so they
    # really run side by side once it is released; link's force-closes join them then.
    gate = await asyncpg.connect(database_url)
    try:
        transaction = gate.transaction()
        await transaction.start()
        await gate.execute("lock table user_activity.sessions in share mode")
        processes = [pin_sessions("job", "activity-closer", "--once", env=env) for _ in range(2)]
        await wait_for_lock_waiters(runtime, 2)
        await transaction.rollback()

        async def link(anonymous_id: uuid.UUID) -> bool:
            now = datetime.now(UTC)
            caller = SignedInCaller(user_b, now)
            outcome = await linking.link(linker, anonymous_id, caller, DESKTOP, now)
            return outcome.switched

        # Every link waits for the closers' row locks at once: a pool without the API's
        # acquire bound, which would turn this deliberate pile-up into 503s.
        linker = Database(database_url, max_size=10)
        await linker.open()
        try:
            switched = await asyncio.gather(*(link(device) for device in linked_devices))
        finally:
            await linker.close()
        outputs = [await communicate(process) for process in processes]
    finally:
        await gate.close()

    results = [
        _once_output(process, out, err)
        for process, (out, err) in zip(processes, outputs, strict=True)
    ]
    assert all(set(result) == CLOSER_OUTPUT for result in results)
    closed = [int(str(result["closed"])) for result in results]
    assert all(count > 0 for count in closed), "both instances took batches"
    assert sum(closed) + sum(switched) == GUEST_SESSIONS + LINKED_SESSIONS
    async with runtime.database.connection() as conn:
        ended = await session_ended_counts(conn)
        view_events = await conn.fetch(
            "select aggregate_id, count(*) as n from messaging.outbox "
            "where event_type = 'pin.user-activity.property-object-view-ended' "
            "group by aggregate_id"
        )
        active = await conn.fetchval(
            "select count(*) from user_activity.sessions where status = 'Active'"
        )
    assert dict(ended) == dict.fromkeys(idle_ids, 1)
    assert len(view_events) == GUEST_SESSIONS + LINKED_SESSIONS
    assert {row["n"] for row in view_events} == {1}
    # The fresh sessions stay open; every linked device has its new session for user B.
    assert active == FRESH_SESSIONS + LINKED_SESSIONS


async def test_activity_retention_once_prints_its_result_as_one_json_object(
    runtime: Runtime, settings_env: dict[str, str]
) -> None:
    long_ago = datetime.now(UTC) - timedelta(days=400)
    async with runtime.database.connection() as conn:
        ids = await insert_sessions(
            conn, count=3, created_at=long_ago, last_activity_at=long_ago, status="Inactive"
        )
        await insert_views(conn, ids, started_at=long_ago, ended_at=long_ago)
        await insert_actions(conn, ids[:2], created_at=long_ago)

    process = pin_sessions("job", "activity-retention", "--once", env=settings_env)
    out, err = await communicate(process)

    result = _once_output(process, out, err)
    assert result == {
        "jobRunId": result["jobRunId"],
        "sessionsDeleted": 3,
        "actionEventsDeleted": 2,
        "propertyObjectViewsDeleted": 3,
        "idempotencyKeysDeleted": 0,
        "durationMs": result["durationMs"],
    }


async def test_up_runs_both_user_activity_jobs_and_shows_their_metrics(
    settings_env: dict[str, str],
) -> None:
    metrics = await metrics_of_up(settings_env)
    for name in (
        "user_activity_activity_closer_closed_total",
        "user_activity_activity_closer_backlog",
        "user_activity_activity_closer_last_success_timestamp_seconds",
        "user_activity_activity_retention_deleted_total",
    ):
        assert name in metrics

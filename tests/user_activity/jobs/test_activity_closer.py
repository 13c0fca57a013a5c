"""ActivityCloserJob against real PostgreSQL: what a run closes, how, and how it stops."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import datetime, timedelta

from prometheus_client import CollectorRegistry

from pin_sessions.platform.clock import FixedClock
from pin_sessions.platform.ids import new_id
from pin_sessions.platform.runtime import Runtime
from tests.support.waiting import wait_until
from tests.user_activity.conftest import outbox
from tests.user_activity.jobs.rows import insert_sessions, insert_views
from tests.user_activity.jobs.support import close_once, closer_worker

MINUTE = timedelta(minutes=1)
THRESHOLD = 15 * MINUTE
HOUR = 60 * MINUTE
CLOSED_TOTAL = "user_activity_activity_closer_closed_total"
VIEWS_CLOSED_TOTAL = "user_activity_activity_closer_views_closed_total"


async def test_an_empty_table_is_a_no_op_success(
    runtime: Runtime, registry: CollectorRegistry
) -> None:
    result = await close_once(runtime, registry)

    assert result.succeeded
    assert result.to_json() == {
        "jobRunId": str(result.job_run_id),
        "closed": 0,
        "viewsClosed": 0,
        "durationMs": result.duration_ms,
        "backlogRemaining": 0,
    }
    assert registry.get_sample_value(CLOSED_TOTAL) == 0
    assert registry.get_sample_value("user_activity_activity_closer_backlog") == 0
    assert registry.get_sample_value(
        "user_activity_activity_closer_last_success_timestamp_seconds"
    ) == (runtime.clock.now().timestamp())
    assert await outbox(runtime) == []


async def test_an_idle_session_closes_with_its_duration_end_views_and_events(
    runtime: Runtime, registry: CollectorRegistry
) -> None:
    now = runtime.clock.now()
    created, last_activity = now - 60 * MINUTE, now - 20 * MINUTE
    user_id = new_id()
    async with runtime.database.connection() as conn:
        [session_id] = await insert_sessions(
            conn, count=1, created_at=created, last_activity_at=last_activity, user_id=user_id
        )
        [early] = await insert_views(conn, [session_id], started_at=now - 50 * MINUTE)
        # Started after the session's last activity (another instance's clock): it ends at
        # its own start, never before it.
        [late] = await insert_views(conn, [session_id], started_at=now - 19 * MINUTE)
        [ended] = await insert_views(
            conn, [session_id], started_at=now - 40 * MINUTE, ended_at=now - 30 * MINUTE
        )

    result = await close_once(runtime, registry)

    assert (result.count("closed"), result.count("viewsClosed"), result.backlog_remaining) == (
        1,
        2,
        0,
    )
    async with runtime.database.connection() as conn:
        session = await conn.fetchrow(
            "select * from user_activity.sessions where id = $1", session_id
        )
        views = {
            row["id"]: row
            for row in await conn.fetch("select * from user_activity.property_object_views")
        }
    assert session is not None
    assert (session["status"], session["ended_at"], session["duration"]) == (
        "Inactive",
        now,
        40 * MINUTE,
    )
    assert (views[early]["ended_at"], views[early]["duration"]) == (last_activity, 30 * MINUTE)
    assert (views[late]["ended_at"], views[late]["duration"]) == (now - 19 * MINUTE, 0 * MINUTE)
    assert views[ended]["ended_at"] == now - 30 * MINUTE, "an ended view is left alone"
    [session_ended] = await outbox(runtime, "pin.user-activity.session-ended")
    assert session_ended["payload"] == {
        "SessionId": str(session_id),
        "AnonymousId": session_ended["payload"]["AnonymousId"],
        "UserId": str(user_id),
        "CreatedAt": created.isoformat(),
        "LastActivityAt": last_activity.isoformat(),
        "DurationSeconds": 40 * 60,
    }
    view_events = await outbox(runtime, "pin.user-activity.property-object-view-ended")
    assert {event["payload"]["ViewId"] for event in view_events} == {str(early), str(late)}
    # The view started as a guest's; its event carries the session's user at closing time.
    assert {event["payload"]["UserId"] for event in view_events} == {str(user_id)}
    assert registry.get_sample_value(CLOSED_TOTAL) == 1
    assert registry.get_sample_value(VIEWS_CLOSED_TOTAL) == 2


async def test_only_sessions_idle_for_more_than_the_threshold_close(
    runtime: Runtime, registry: CollectorRegistry
) -> None:
    now = runtime.clock.now()
    async with runtime.database.connection() as conn:
        [idle] = await insert_sessions(
            conn, count=1, created_at=now - THRESHOLD * 2, last_activity_at=now - THRESHOLD - MINUTE
        )
        [at_threshold] = await insert_sessions(
            conn, count=1, created_at=now - THRESHOLD * 2, last_activity_at=now - THRESHOLD
        )
        [fresh] = await insert_sessions(conn, count=1, created_at=now, last_activity_at=now)

    result = await close_once(runtime, registry)

    assert result.count("closed") == 1
    async with runtime.database.connection() as conn:
        rows = await conn.fetch("select id, status from user_activity.sessions")
    assert {row["id"]: row["status"] for row in rows} == {
        idle: "Inactive",
        at_threshold: "Active",
        fresh: "Active",
    }


async def test_the_inactivity_threshold_comes_from_the_settings(
    runtime: Runtime, registry: CollectorRegistry
) -> None:
    now = runtime.clock.now()
    async with runtime.database.connection() as conn:
        await insert_sessions(
            conn, count=3, created_at=now - HOUR, last_activity_at=now - 11 * MINUTE
        )

    kept = await close_once(runtime, registry)
    closed = await close_once(runtime, CollectorRegistry(), inactivity_threshold=10 * MINUTE)

    assert (kept.count("closed"), closed.count("closed")) == (0, 3)


async def test_a_second_run_finds_nothing_left_to_close(
    runtime: Runtime, registry: CollectorRegistry
) -> None:
    now = runtime.clock.now()
    async with runtime.database.connection() as conn:
        ids = await insert_sessions(
            conn, count=5, created_at=now - HOUR, last_activity_at=now - THRESHOLD * 2
        )
        await insert_views(conn, ids, started_at=now - THRESHOLD * 3)
    worker = closer_worker(runtime, registry)

    first = await worker.run_pass(asyncio.Event())
    second = await worker.run_pass(asyncio.Event())

    assert first is not None and second is not None
    assert (first.count("closed"), first.count("viewsClosed")) == (5, 5)
    assert (second.count("closed"), second.count("viewsClosed")) == (0, 0)
    assert len(await outbox(runtime, "pin.user-activity.session-ended")) == 5


async def test_a_backlog_is_closed_in_batches_of_batch_size(
    runtime: Runtime, registry: CollectorRegistry
) -> None:
    now = runtime.clock.now()
    async with runtime.database.connection() as conn:
        await insert_sessions(
            conn, count=25, created_at=now - HOUR, last_activity_at=now - THRESHOLD * 2
        )

    result = await close_once(runtime, registry, batch_size=10)

    assert (
        result.count("closed"),
        result.phases["close"].progress.batches,
        result.backlog_remaining,
    ) == (25, 3, 0)
    # One transaction per batch: each batch's events share one transaction id.
    async with runtime.database.connection() as conn:
        per_transaction = await conn.fetch(
            "select count(*) as n from messaging.outbox group by txid order by n desc"
        )
    assert [row["n"] for row in per_transaction] == [10, 10, 5]


async def test_max_run_duration_ends_the_run_between_batches_and_reports_the_rest(
    runtime: Runtime, registry: CollectorRegistry
) -> None:
    now = runtime.clock.now()
    async with runtime.database.connection() as conn:
        await insert_sessions(
            conn, count=35, created_at=now - HOUR, last_activity_at=now - THRESHOLD * 2
        )

    result = await close_once(
        runtime, registry, batch_size=10, max_run_duration=timedelta(microseconds=1)
    )

    assert result.succeeded
    assert (
        result.count("closed"),
        result.phases["close"].progress.batches,
        result.backlog_remaining,
    ) == (10, 1, 25)
    assert result.to_json()["backlogRemaining"] == 25
    assert registry.get_sample_value("user_activity_activity_closer_backlog") == 25


async def test_stop_set_before_a_run_closes_nothing(
    runtime: Runtime, registry: CollectorRegistry
) -> None:
    now = runtime.clock.now()
    async with runtime.database.connection() as conn:
        await insert_sessions(
            conn, count=3, created_at=now - HOUR, last_activity_at=now - THRESHOLD * 2
        )
    stop = asyncio.Event()
    stop.set()

    result = await closer_worker(runtime, registry).run_pass(stop)

    assert result is not None
    assert (result.phases["close"].skipped, result.count("closed"), result.backlog_remaining) == (
        True,
        0,
        3,
    )


async def test_stop_during_a_run_lets_the_running_batch_commit_and_starts_no_other(
    runtime: Runtime, registry: CollectorRegistry
) -> None:
    now = runtime.clock.now()
    async with runtime.database.connection() as conn:
        await insert_sessions(
            conn, count=2000, created_at=now - HOUR, last_activity_at=now - THRESHOLD * 2
        )
    stop = asyncio.Event()

    async def stop_after_the_first_batch() -> None:
        await wait_until(
            lambda: bool(registry.get_sample_value(CLOSED_TOTAL)), timeout=30, interval=0
        )
        stop.set()

    stopper = asyncio.create_task(stop_after_the_first_batch())
    result = await closer_worker(runtime, registry, batch_size=20).run_pass(stop)
    await stopper

    assert result is not None
    assert 0 < result.count("closed") < 2000
    assert result.count("closed") % 20 == 0, "every started batch ran to its end"
    assert result.backlog_remaining == 2000 - result.count("closed")
    assert len(await outbox(runtime, "pin.user-activity.session-ended")) == result.count("closed")


class _TickingClock(FixedClock):
    """Each reading is one minute after the previous one: a run that takes time."""

    def now(self) -> datetime:
        instant = super().now()
        self.advance(MINUTE)
        return instant


async def test_each_batch_stamps_the_sessions_it_closes_with_its_own_time(
    runtime: Runtime, registry: CollectorRegistry
) -> None:
    clock = _TickingClock(runtime.clock.now())
    started = clock.now()
    async with runtime.database.connection() as conn:
        await insert_sessions(
            conn, count=3, created_at=started - HOUR, last_activity_at=started - 2 * THRESHOLD
        )
    timed = replace(runtime, clock=clock)

    result = await close_once(timed, registry, batch_size=1)

    assert (result.count("closed"), result.phases["close"].progress.batches) == (3, 4)
    async with runtime.database.connection() as conn:
        ended = await conn.fetch("select ended_at from user_activity.sessions order by ended_at")
        event_times = await conn.fetch(
            "select created_at from messaging.outbox "
            "where event_type = 'pin.user-activity.session-ended' order by created_at"
        )
    # Three batches, three instants, every one after the run began (SPEC §6).
    stamps = [row["ended_at"] for row in ended]
    assert len(set(stamps)) == 3
    assert all(stamp > started for stamp in stamps)
    assert [row["created_at"] for row in event_times] == stamps

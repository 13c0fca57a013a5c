"""ExpireSessionsJob against real PostgreSQL: seed 000's test table, row by row."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta

import asyncpg
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from pin_sessions.identity.jobs.expire_sessions import ExpireSessionsJob
from pin_sessions.platform.clock import FixedClock
from pin_sessions.platform.database import Database
from pin_sessions.platform.metrics import new_registry
from pin_sessions.platform.runtime import Runtime
from tests.conftest import LogCapture
from tests.identity.jobs.rows import (
    CREATE_TRANSITION_AUDIT,
    insert_refresh_sessions,
    insert_sicr,
    insert_user,
    statuses,
)
from tests.identity.jobs.support import expire_once, expire_sessions_worker
from tests.support.waiting import wait_until

PAST = timedelta(minutes=1)
BACKLOG = "identity_expire_sessions_backlog"

SELECT_REFRESH_ROWS = "select * from identity.refresh_sessions order by id"
SELECT_SICR_ROWS = "select * from identity.sign_in_confirmation_requests order by id"


async def test_empty_tables_are_a_no_op_success(
    runtime: Runtime, registry: CollectorRegistry
) -> None:
    result = await expire_once(runtime, registry)

    assert result.succeeded
    assert result.to_json() == {
        "jobRunId": str(result.job_run_id),
        "refreshExpired": 0,
        "sicrExpired": 0,
        "durationMs": result.duration_ms,
        "backlogRemaining": 0,
    }
    assert registry.get_sample_value("identity_expire_sessions_refresh_expired_total") == 0
    assert registry.get_sample_value(BACKLOG) == 0
    assert registry.get_sample_value("identity_expire_sessions_errors_total") == 0
    assert registry.get_sample_value("identity_expire_sessions_last_success_timestamp_seconds") == (
        runtime.clock.now().timestamp()
    )


async def test_expired_refresh_session_becomes_expired_and_is_not_revoked(
    runtime: Runtime, registry: CollectorRegistry
) -> None:
    now = runtime.clock.now()
    async with runtime.database.connection() as conn:
        user = await insert_user(conn, now)
        created = now - timedelta(days=30)
        expired = await insert_refresh_sessions(
            conn, user, count=3, status="Active", created_at=created, expires_at=now - PAST
        )
        # `expires_at <= now` is the guard: the boundary instant is expired.
        boundary = await insert_refresh_sessions(
            conn, user, count=1, status="Active", created_at=created, expires_at=now
        )
        live = await insert_refresh_sessions(
            conn, user, count=2, status="Active", created_at=created, expires_at=now + PAST
        )
        await insert_refresh_sessions(
            conn,
            user,
            count=1,
            status="Revoked",
            created_at=created,
            expires_at=now - PAST,
            revoked_at=now - timedelta(days=1),
            revoked_reason="Logout",
        )
        await insert_refresh_sessions(
            conn,
            user,
            count=1,
            status="Rotated",
            created_at=created,
            expires_at=now - PAST,
            rotated_at=now - timedelta(days=2),
        )
        before = {row["id"]: dict(row) for row in await conn.fetch(SELECT_REFRESH_ROWS)}

    result = await expire_once(runtime, registry)

    assert (
        result.count("refreshExpired"),
        result.count("sicrExpired"),
        result.backlog_remaining,
    ) == (4, 0, 0)
    async with runtime.database.connection() as conn:
        after = {row["id"]: dict(row) for row in await conn.fetch(SELECT_REFRESH_ROWS)}
        outbox = await conn.fetchval("select count(*) from messaging.outbox")
    for row_id, row in after.items():
        expected_status = "Expired" if row_id in {*expired, *boundary} else before[row_id]["status"]
        # Only the status column changes: no revoke fields, no version bump, nothing else.
        assert row == {**before[row_id], "status": expected_status}
    assert all(after[row_id]["status"] == "Active" for row_id in live)
    assert all(after[row_id]["revoked_at"] is None for row_id in expired)
    assert outbox == 0, "expiry is silent: nothing is published"
    assert registry.get_sample_value("identity_expire_sessions_refresh_expired_total") == 4


async def test_expired_sicr_becomes_expired_and_stays_unconfirmed(
    runtime: Runtime, registry: CollectorRegistry
) -> None:
    now = runtime.clock.now()
    created = now - timedelta(minutes=6)
    async with runtime.database.connection() as conn:
        expired = await insert_sicr(
            conn, count=3, status="Pending", created_at=created, expires_at=now - PAST
        )
        live = await insert_sicr(
            conn, count=2, status="Pending", created_at=now, expires_at=now + PAST
        )
        confirmed = await insert_sicr(
            conn,
            count=1,
            status="Confirmed",
            created_at=created,
            expires_at=now - PAST,
            confirmed_at=created,
        )
        before = {row["id"]: dict(row) for row in await conn.fetch(SELECT_SICR_ROWS)}

    result = await expire_once(runtime, registry)

    assert (result.count("refreshExpired"), result.count("sicrExpired")) == (0, 3)
    async with runtime.database.connection() as conn:
        after = {row["id"]: dict(row) for row in await conn.fetch(SELECT_SICR_ROWS)}
        outbox = await conn.fetchval("select count(*) from messaging.outbox")
    for row_id in expired:
        assert after[row_id] == {**before[row_id], "status": "Expired"}
        assert after[row_id]["confirmed_at"] is None
    assert all(after[row_id] == before[row_id] for row_id in [*live, *confirmed])
    assert outbox == 0
    assert registry.get_sample_value("identity_expire_sessions_sicr_expired_total") == 3


async def test_a_restarted_job_finds_nothing_left_to_flip(
    runtime: Runtime, registry: CollectorRegistry
) -> None:
    now = runtime.clock.now()
    async with runtime.database.connection() as conn:
        user = await insert_user(conn, now)
        await insert_refresh_sessions(
            conn, user, count=5, status="Active", created_at=now, expires_at=now - PAST
        )
        await insert_sicr(conn, count=5, status="Pending", created_at=now, expires_at=now - PAST)
        await conn.execute(CREATE_TRANSITION_AUDIT)
    first = await expire_once(runtime, registry, batch_size=2)

    # A restart is a new process: a new job, a new registry, no checkpoint.
    second = await expire_once(runtime, new_registry(), batch_size=2)

    assert (first.count("refreshExpired"), first.count("sicrExpired")) == (5, 5)
    assert (
        second.count("refreshExpired"),
        second.count("sicrExpired"),
        second.backlog_remaining,
    ) == (0, 0, 0)
    async with runtime.database.connection() as conn:
        transitions = await conn.fetchval("select count(*) from public.test_transitions")
    assert transitions == 10


async def test_a_backlog_within_batch_size_is_one_set_based_update(
    runtime: Runtime, registry: CollectorRegistry
) -> None:
    now = runtime.clock.now()
    async with runtime.database.connection() as conn:
        user = await insert_user(conn, now)
        await insert_refresh_sessions(
            conn, user, count=50, status="Active", created_at=now, expires_at=now - PAST
        )
        await conn.execute(CREATE_TRANSITION_AUDIT)

    result = await expire_once(runtime, registry, batch_size=50)

    assert (result.count("refreshExpired"), result.phases["refresh"].progress.batches) == (50, 1)
    async with runtime.database.connection() as conn:
        transactions = await conn.fetchval(
            "select count(distinct txid) from public.test_transitions"
        )
    assert transactions == 1


async def test_a_backlog_over_batch_size_is_expired_in_chunks_of_at_most_batch_size_rows(
    runtime: Runtime, registry: CollectorRegistry
) -> None:
    now = runtime.clock.now()
    async with runtime.database.connection() as conn:
        user = await insert_user(conn, now)
        await insert_refresh_sessions(
            conn, user, count=250, status="Active", created_at=now, expires_at=now - PAST
        )
        await insert_sicr(conn, count=101, status="Pending", created_at=now, expires_at=now - PAST)
        await conn.execute(CREATE_TRANSITION_AUDIT)

    result = await expire_once(runtime, registry, batch_size=100)

    assert (
        result.count("refreshExpired"),
        result.count("sicrExpired"),
        result.backlog_remaining,
    ) == (250, 101, 0)
    async with runtime.database.connection() as conn:
        per_transaction = await conn.fetch(
            "select table_name, count(*) as n from public.test_transitions "
            "group by table_name, txid order by table_name, n desc"
        )
    # Each chunk commits on its own and locks no more than BatchSize rows.
    assert [(row["table_name"], row["n"]) for row in per_transaction] == [
        ("refresh_sessions", 100),
        ("refresh_sessions", 100),
        ("refresh_sessions", 50),
        ("sign_in_confirmation_requests", 100),
        ("sign_in_confirmation_requests", 1),
    ]


async def test_max_run_duration_cuts_the_run_between_chunks_and_reports_the_rest(
    runtime: Runtime, registry: CollectorRegistry
) -> None:
    now = runtime.clock.now()
    async with runtime.database.connection() as conn:
        user = await insert_user(conn, now)
        await insert_refresh_sessions(
            conn, user, count=500, status="Active", created_at=now, expires_at=now - PAST
        )
        await insert_sicr(conn, count=300, status="Pending", created_at=now, expires_at=now - PAST)
    worker = expire_sessions_worker(
        runtime, registry, batch_size=100, max_run_duration=timedelta(microseconds=1)
    )

    first = await worker.run_pass(asyncio.Event())

    # The budget is spent after the first chunk; each phase still makes one chunk of
    # progress, so SICR does not starve behind refresh sessions.
    assert first is not None
    assert (first.count("refreshExpired"), first.count("sicrExpired"), first.backlog_remaining) == (
        100,
        100,
        600,
    )
    assert first.succeeded
    # One series: what is left over both phases (400 refresh sessions, 200 SICR).
    assert registry.get_sample_value(BACKLOG) == 600
    async with runtime.database.connection() as conn:
        assert await statuses(conn, "refresh_sessions") == {"Expired": 100, "Active": 400}
    second = await worker.run_pass(asyncio.Event())
    assert second is not None
    assert second.backlog_remaining == 400
    assert registry.get_sample_value(BACKLOG) == 400


async def test_a_run_stopped_before_its_phases_still_reports_their_backlog(
    runtime: Runtime, registry: CollectorRegistry, captured_logs: LogCapture
) -> None:
    now = runtime.clock.now()
    async with runtime.database.connection() as conn:
        await insert_sicr(conn, count=300, status="Pending", created_at=now, expires_at=now - PAST)
    worker = expire_sessions_worker(
        runtime, registry, batch_size=100, max_run_duration=timedelta(microseconds=1)
    )
    assert await worker.run_pass(asyncio.Event()) is not None
    assert registry.get_sample_value(BACKLOG) == 200
    stop = asyncio.Event()
    stop.set()

    skipped = await worker.run_pass(stop)

    # Both phases skipped, yet what they left is counted: 200 rows, not "0 left".
    assert skipped is not None
    assert (skipped.phases["refresh"].skipped, skipped.phases["sicr"].skipped) == (True, True)
    assert skipped.to_json()["backlogRemaining"] == 200
    assert registry.get_sample_value(BACKLOG) == 200
    completed = [
        event
        for event in map(json.loads, captured_logs.lines())
        if event.get("jobRunId") == str(skipped.job_run_id) and event["event"] == "job completed"
    ]
    assert [event["backlogRemaining"] for event in completed] == [200]


async def test_a_run_that_cannot_count_its_backlog_reports_it_unknown_and_keeps_the_gauge(
    runtime: Runtime, registry: CollectorRegistry
) -> None:
    registry_gauge_before = 7.0
    # Nothing listens there: every phase fails before it can count anything.
    unreachable = Database("postgresql://postgres@127.0.0.1:9/nowhere", min_size=0)
    await unreachable.open()
    worker = expire_sessions_worker(replace(runtime, database=unreachable), registry)
    assert isinstance(worker.job, ExpireSessionsJob)
    worker.metrics.gauge("backlog").set(registry_gauge_before)
    try:
        result = await worker.run_pass(asyncio.Event())
    finally:
        await unreachable.close()

    assert result is not None and (
        result.phases["refresh"].failed,
        result.phases["sicr"].failed,
    ) == (True, True)
    # Unknown, not zero: half a sum (or none) would look like a shrinking backlog.
    assert result.to_json()["backlogRemaining"] is None
    assert registry.get_sample_value(BACKLOG) == registry_gauge_before


async def test_one_run_logs_the_seed_events_under_its_job_run_id(
    runtime: Runtime, registry: CollectorRegistry, captured_logs: LogCapture
) -> None:
    now = runtime.clock.now()
    async with runtime.database.connection() as conn:
        user = await insert_user(conn, now)
        await insert_refresh_sessions(
            conn, user, count=2, status="Active", created_at=now, expires_at=now - PAST
        )
        await insert_sicr(conn, count=1, status="Pending", created_at=now, expires_at=now - PAST)

    result = await expire_once(runtime, registry)

    run_id = str(result.job_run_id)
    events = [json.loads(line) for line in captured_logs.lines()]
    mine = [event for event in events if event.get("jobRunId") == run_id]
    assert [event["event"] for event in mine] == [
        "job started",
        "phase done",
        "phase done",
        "job completed",
    ]
    assert [(e["phase"], e["expiredCount"]) for e in mine[1:3]] == [("refresh", 2), ("sicr", 1)]
    completed = mine[3]
    assert {key: completed[key] for key in result.to_json()} == result.to_json()
    assert (completed["refreshExpired"], completed["sicrExpired"]) == (2, 1)
    assert "durationMs" in completed and completed["backlogRemaining"] == 0


async def test_one_run_is_one_span_with_job_run_id_and_expired_count_and_a_child_per_phase(
    runtime: Runtime, registry: CollectorRegistry
) -> None:
    now = runtime.clock.now()
    async with runtime.database.connection() as conn:
        await insert_sicr(conn, count=2, status="Pending", created_at=now, expires_at=now - PAST)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    worker = expire_sessions_worker(runtime, registry, tracer=provider.get_tracer("test"))

    result = await worker.run_pass(asyncio.Event())

    assert result is not None
    spans = exporter.get_finished_spans()
    roots = [span for span in spans if span.parent is None]
    assert len(roots) == 1
    run_id = str(result.job_run_id)
    assert roots[0].attributes == {"jobRunId": run_id, "expiredCount": 2}
    phases = {
        span.attributes["phase"]: (span.attributes["jobRunId"], span.attributes["expiredCount"])
        for span in spans
        if span.attributes and "phase" in span.attributes
    }
    assert phases == {"refresh": (run_id, 0), "sicr": (run_id, 2)}
    assert all(span.parent is not None for span in spans if span is not roots[0])
    assert {span.context.trace_id for span in spans} == {roots[0].context.trace_id}


async def test_a_failing_phase_is_logged_and_counted_while_the_other_completes(
    runtime: Runtime,
    registry: CollectorRegistry,
    database_url: str,
    captured_logs: LogCapture,
) -> None:
    now = runtime.clock.now()
    async with runtime.database.connection() as conn:
        user = await insert_user(conn, now)
        await insert_refresh_sessions(
            conn, user, count=3, status="Active", created_at=now, expires_at=now - PAST
        )
        await insert_sicr(conn, count=4, status="Pending", created_at=now, expires_at=now - PAST)
    # Another transaction holds one of the expired sessions: the refresh UPDATE times out.
    holder = await asyncpg.connect(database_url)
    try:
        locking = holder.transaction()
        await locking.start()
        await holder.execute("select id from identity.refresh_sessions limit 1 for update")
        result = await expire_once(runtime, registry, lock_timeout=timedelta(milliseconds=100))
        await locking.rollback()
    finally:
        await holder.close()

    assert (result.phases["refresh"].failed, result.count("refreshExpired")) == (True, 0)
    assert (result.phases["sicr"].failed, result.count("sicrExpired")) == (False, 4)
    assert not result.succeeded
    assert result.backlog_remaining == 3
    # One series each: the failed phase counted once; its rows, counted before the
    # UPDATE timed out, are the backlog.
    assert registry.get_sample_value("identity_expire_sessions_errors_total") == 1
    assert registry.get_sample_value(BACKLOG) == 3
    # A run with a failed phase is not a success: the stalled-worker alert keeps counting.
    assert registry.get_sample_value("identity_expire_sessions_last_success_timestamp_seconds") == 0
    failed = [
        event
        for event in map(json.loads, captured_logs.lines())
        if event.get("jobRunId") == str(result.job_run_id) and event["event"] == "phase failed"
    ]
    assert [event["phase"] for event in failed] == ["refresh"]
    assert "LockNotAvailableError" in failed[0]["exception"]
    async with runtime.database.connection() as conn:
        assert await statuses(conn, "refresh_sessions") == {"Active": 3}
        assert await statuses(conn, "sign_in_confirmation_requests") == {"Expired": 4}


async def test_a_run_decides_with_the_now_read_from_the_clock_at_its_start(
    runtime: Runtime, registry: CollectorRegistry, clock: FixedClock
) -> None:
    now = clock.now()
    async with runtime.database.connection() as conn:
        user = await insert_user(conn, now)
        await insert_refresh_sessions(
            conn, user, count=2, status="Active", created_at=now, expires_at=now + PAST
        )
    worker = expire_sessions_worker(runtime, registry)
    assert (await worker.run_pass(asyncio.Event())) is not None

    # Decisions use the `now` the worker read at the start of the run: moving the clock
    # past expiry is what makes these rows expired.
    clock.advance(2 * PAST)
    later = await worker.run_pass(asyncio.Event())

    assert later is not None and later.count("refreshExpired") == 2


async def test_stop_set_before_a_run_skips_both_phases(
    runtime: Runtime, registry: CollectorRegistry
) -> None:
    now = runtime.clock.now()
    async with runtime.database.connection() as conn:
        await insert_sicr(conn, count=2, status="Pending", created_at=now, expires_at=now - PAST)
    stop = asyncio.Event()
    stop.set()

    result = await expire_sessions_worker(runtime, registry).run_pass(stop)

    assert result is not None
    assert (result.phases["refresh"].skipped, result.phases["sicr"].skipped) == (True, True)
    async with runtime.database.connection() as conn:
        assert await statuses(conn, "sign_in_confirmation_requests") == {"Pending": 2}


async def test_stop_during_a_phase_lets_the_running_chunk_commit_and_skips_the_rest(
    runtime: Runtime, registry: CollectorRegistry
) -> None:
    now = runtime.clock.now()
    async with runtime.database.connection() as conn:
        user = await insert_user(conn, now)
        await insert_refresh_sessions(
            conn, user, count=5000, status="Active", created_at=now, expires_at=now - PAST
        )
        await insert_sicr(conn, count=10, status="Pending", created_at=now, expires_at=now - PAST)
        await conn.execute(CREATE_TRANSITION_AUDIT)
    stop = asyncio.Event()
    flipped = registry_counter(registry, "identity_expire_sessions_refresh_expired_total")

    async def stop_after_the_first_chunk() -> None:
        # The signal arrives while the job is inside a later chunk's UPDATE.
        await wait_until(lambda: flipped() > 0, timeout=30, interval=0)
        stop.set()

    stopper = asyncio.create_task(stop_after_the_first_chunk())
    result = await expire_sessions_worker(runtime, registry, batch_size=50).run_pass(stop)
    await stopper

    assert result is not None
    assert 0 < result.count("refreshExpired") < 5000
    assert result.count("refreshExpired") % 50 == 0, "every started chunk ran to its end"
    assert result.phases["sicr"].skipped
    assert result.phases["refresh"].remaining == 5000 - result.count("refreshExpired")
    async with runtime.database.connection() as conn:
        assert await statuses(conn, "refresh_sessions") == {
            "Expired": result.count("refreshExpired"),
            "Active": 5000 - result.count("refreshExpired"),
        }
        assert await statuses(conn, "sign_in_confirmation_requests") == {"Pending": 10}
        largest = await conn.fetchval(
            "select max(n) from (select count(*) as n from public.test_transitions group by txid) t"
        )
    assert largest == 50


def registry_counter(registry: CollectorRegistry, name: str) -> Callable[[], float]:
    return lambda: registry.get_sample_value(name) or 0.0

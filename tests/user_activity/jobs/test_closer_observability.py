"""ActivityCloserJob's observability and failure handling: seed 000's log events, one span
per run, errors counted, and the claim's index."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from pin_sessions.platform.runtime import Runtime
from pin_sessions.user_activity.repository.loaded import QUERIES
from tests.conftest import LogCapture
from tests.user_activity.jobs.rows import insert_sessions, insert_views
from tests.user_activity.jobs.support import close_once, closer_worker

THRESHOLD = timedelta(minutes=15)
HOUR = timedelta(hours=1)


async def test_one_run_logs_the_seed_events_under_its_job_run_id(
    runtime: Runtime, registry: CollectorRegistry, captured_logs: LogCapture
) -> None:
    now = runtime.clock.now()
    async with runtime.database.connection() as conn:
        ids = await insert_sessions(
            conn, count=2, created_at=now - HOUR, last_activity_at=now - THRESHOLD * 2
        )
        await insert_views(conn, ids[:1], started_at=now - THRESHOLD * 3)

    result = await close_once(runtime, registry)

    mine = [
        event
        for event in map(json.loads, captured_logs.lines())
        if event.get("jobRunId") == str(result.job_run_id)
    ]
    assert [event["event"] for event in mine] == ["job started", "phase done", "job completed"]
    assert (mine[1]["phase"], mine[1]["closedCount"], mine[1]["viewsClosedCount"]) == (
        "close",
        2,
        1,
    )
    assert {key: mine[2][key] for key in result.to_json()} == result.to_json()


async def test_one_run_is_one_span_with_job_run_id_and_a_close_phase_child(
    runtime: Runtime, registry: CollectorRegistry
) -> None:
    now = runtime.clock.now()
    async with runtime.database.connection() as conn:
        await insert_sessions(
            conn, count=2, created_at=now - HOUR, last_activity_at=now - THRESHOLD * 2
        )
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))

    result = await closer_worker(runtime, registry, tracer=provider.get_tracer("t")).run_pass(
        asyncio.Event()
    )

    assert result is not None
    spans = exporter.get_finished_spans()
    [root] = [span for span in spans if span.parent is None]
    assert root.attributes == {"jobRunId": str(result.job_run_id)}
    [phase] = [span for span in spans if span.attributes and "phase" in span.attributes]
    assert (phase.attributes or {})["phase"] == "close"
    assert (phase.attributes or {})["closedCount"] == 2
    assert phase.parent is not None and phase.parent.span_id == root.context.span_id


async def test_a_failed_batch_rolls_back_is_logged_and_counted(
    runtime: Runtime, registry: CollectorRegistry, captured_logs: LogCapture
) -> None:
    now = runtime.clock.now()
    async with runtime.database.connection() as conn:
        ids = await insert_sessions(
            conn, count=3, created_at=now - HOUR, last_activity_at=now - THRESHOLD * 2
        )
        await insert_views(conn, ids, started_at=now - THRESHOLD * 3)
        # The outbox is gone (a broken deployment): the batch cannot publish, so it must
        # not close anything either.
        await conn.execute("alter table messaging.outbox rename to outbox_away")
    try:
        result = await close_once(runtime, registry)
    finally:
        async with runtime.database.connection() as conn:
            await conn.execute("alter table messaging.outbox_away rename to outbox")

    assert not result.succeeded
    assert (result.count("closed"), result.count("viewsClosed"), result.backlog_remaining) == (
        0,
        0,
        3,
    )
    assert registry.get_sample_value("user_activity_activity_closer_errors_total") == 1
    assert (
        registry.get_sample_value("user_activity_activity_closer_last_success_timestamp_seconds")
        == 0
    )
    [failed] = [
        event
        for event in map(json.loads, captured_logs.lines())
        if event.get("jobRunId") == str(result.job_run_id) and event["event"] == "phase failed"
    ]
    assert failed["phase"] == "close"
    async with runtime.database.connection() as conn:
        statuses = await conn.fetch("select status from user_activity.sessions")
        open_views = await conn.fetchval(
            "select count(*) from user_activity.property_object_views where ended_at is null"
        )
    assert {row["status"] for row in statuses} == {"Active"}
    assert open_views == 3


async def test_the_claim_goes_through_the_active_last_activity_index(runtime: Runtime) -> None:
    # With sequential scans priced out, a plan without the index means it cannot serve
    # the claim's predicate and order.
    claim = QUERIES.claim_idle_sessions
    async with runtime.database.transaction() as conn:
        await conn.execute("set local enable_seqscan = off")
        plan = "\n".join(
            row[0]
            for row in await conn.fetch(
                f"explain {claim.text}",
                *claim.args(idle_before=runtime.clock.now(), batch_size=500),
            )
        )
    assert "ix_sessions_active_last_activity" in plan and "Sort" not in plan, plan

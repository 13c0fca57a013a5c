"""The job runner: one pass per tick, a failed pass never ends the loop; phases and batches;
the metrics and the result it makes from a job's declaration."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode, Tracer
from prometheus_client import CollectorRegistry

from pin_sessions.bootstrap.jobs import JOB_WORKERS
from pin_sessions.platform.clock import FixedClock
from pin_sessions.platform.ids import new_id
from pin_sessions.platform.job_spec import (
    Count,
    JobMetrics,
    JobSpec,
    Metric,
    Phase,
    backlog,
    counter,
    errors,
    run_duration,
)
from pin_sessions.platform.jobs import JobRun, PhaseRun, PollingWorker
from pin_sessions.platform.runtime import Runtime
from pin_sessions.settings import JobSettings, load_settings
from tests.conftest import LogCapture
from tests.support.waiting import wait_until

SCRIPTED_OPTIONS = JobSettings(
    polling_interval=timedelta(minutes=1), batch_size=1, max_run_duration=timedelta(minutes=1)
)


SCRIPTED = JobSpec(
    name="scripted", metric_prefix="test_scripted", metrics=(errors("failed phases"),), phases=()
)


@dataclass
class ScriptedJob:
    """A job whose passes fail or succeed as scripted; it stops the loop when done."""

    script: list[bool]
    clock: FixedClock
    spec: JobSpec = SCRIPTED
    options: JobSettings = SCRIPTED_OPTIONS
    nows: list[datetime] = field(default_factory=list)

    async def run_once(self, now: datetime, run: JobRun) -> None:
        self.nows.append(now)
        self.clock.advance(timedelta(minutes=1))
        succeeds = self.script.pop(0)
        if not self.script:
            run.stop.set()
        if not succeeds:
            raise ConnectionError("database went away")


async def test_a_failed_pass_is_logged_and_counted_and_the_loop_goes_on(
    clock: FixedClock, registry: CollectorRegistry, captured_logs: LogCapture
) -> None:
    job = ScriptedJob([False, True, False], clock)
    worker = PollingWorker(job, clock=clock, interval=timedelta(0), registry=registry)
    start = clock.now()

    await asyncio.wait_for(worker.run(asyncio.Event()), timeout=30)

    # Three passes, each deciding with the instant read at its start.
    assert job.nows == [start + timedelta(minutes=n) for n in range(3)]
    assert registry.get_sample_value("test_scripted_failed_runs_total") == 2
    # The last success is the end of the second pass, read from the injected clock.
    assert (
        registry.get_sample_value("test_scripted_last_success_timestamp_seconds")
        == (start + timedelta(minutes=2)).timestamp()
    )
    failures = [json.loads(line) for line in captured_logs.lines() if '"job failed"' in line]
    assert failures and "database went away" in failures[-1]["exception"]


async def test_the_loop_waits_for_the_interval_unless_stopped(
    clock: FixedClock, registry: CollectorRegistry
) -> None:
    job = ScriptedJob([True, True], clock)
    worker = PollingWorker(job, clock=clock, interval=timedelta(hours=1), registry=registry)
    stop = asyncio.Event()
    loop = asyncio.create_task(worker.run(stop))
    await wait_until(lambda: bool(job.nows), timeout=10, interval=0)
    await asyncio.sleep(0.05)

    assert len(job.nows) == 1, "no second pass before the interval"
    stop.set()
    await asyncio.wait_for(loop, timeout=30)


def rows_spec(*phases: str, prefix: str = "test_rows") -> JobSpec:
    """A job whose phases each count rows (``rowCount`` in their line, ``<phase>Rows`` in
    the result) into one counter."""
    return JobSpec(
        name="scripted",
        metric_prefix=prefix,
        metrics=(
            counter("rows_total", "rows changed"),
            errors("failed phases"),
        ),
        phases=tuple(
            Phase(
                name,
                counts=(Count("rows", f"{name}Rows", log="rowCount", counter="rows_total"),),
            )
            for name in phases
        ),
    )


def job_run(
    clock: FixedClock,
    tracer: Tracer,
    *,
    spec: JobSpec | None = None,
    registry: CollectorRegistry | None = None,
    started: float | None = None,
    stop: bool = False,
) -> JobRun:
    event = asyncio.Event()
    if stop:
        event.set()
    spec = spec or rows_spec("only")
    run = JobRun(
        id=new_id(),
        spec=spec,
        metrics=JobMetrics(spec, registry or CollectorRegistry()),
        stop=event,
        tracer=tracer,
        clock=clock,
    )
    if started is not None:
        run.started = started
    return run


def limits(batch_size: int, max_run_duration: timedelta) -> JobSettings:
    return JobSettings(
        polling_interval=timedelta(minutes=1),
        batch_size=batch_size,
        max_run_duration=max_run_duration,
    )


def recording_tracer() -> tuple[Tracer, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider.get_tracer("test"), exporter


async def test_a_failed_phase_is_logged_counted_and_absorbed_so_the_next_phase_runs(
    clock: FixedClock, registry: CollectorRegistry, captured_logs: LogCapture
) -> None:
    tracer, exporter = recording_tracer()
    # Phase names of their own: the captured log is the whole session's.
    names = [f"{name}-{new_id()}" for name in ("first", "second")]
    spec = rows_spec(*names, prefix="test_phase")
    run = job_run(clock, tracer, spec=spec, registry=registry)

    async def fails(phase: PhaseRun) -> None:
        phase.add("rows", 2)  # committed before the failure: still reported
        raise ConnectionError("database went away")

    async def succeeds(phase: PhaseRun) -> None:
        phase.add("rows", 5)

    first = await run.phase(names[0], fails)
    second = await run.phase(names[1], succeeds)

    assert (first.failed, second.failed) == (True, False)
    assert registry.get_sample_value("test_phase_errors_total") == 1
    assert registry.get_sample_value("test_phase_rows_total") == 7
    events = {
        event["phase"]: event
        for event in map(json.loads, captured_logs.lines())
        if event.get("phase") in names
    }
    assert events[first.name]["event"] == "phase failed"
    assert events[first.name]["exception"] == "ConnectionError: database went away"
    assert (events[second.name]["event"], events[second.name]["rowCount"]) == ("phase done", 5)
    spans = {span.name: span for span in exporter.get_finished_spans()}
    failed, done = spans[f"scripted {first.name}"], spans[f"scripted {second.name}"]
    assert failed.attributes == {"jobRunId": str(run.id), "phase": first.name, "rowCount": 2}
    assert failed.status.status_code is StatusCode.ERROR
    assert done.attributes == {"jobRunId": str(run.id), "phase": second.name, "rowCount": 5}
    # One result read once: its duration is the monotonic clock's, so a second read may differ.
    result = run.result()
    assert result.to_json() == {
        "jobRunId": str(run.id),
        f"{first.name}Rows": 2,
        f"{second.name}Rows": 5,
        "durationMs": result.duration_ms,
    }
    assert not result.succeeded


async def test_a_phase_is_skipped_once_stop_is_set(clock: FixedClock) -> None:
    tracer, exporter = recording_tracer()
    run = job_run(clock, tracer, stop=True)

    async def work(phase: PhaseRun) -> None:
        phase.add("rows", 1)

    outcome = await run.phase("only", work)

    assert (outcome.skipped, outcome.counts["rows"]) == (True, 0)
    assert exporter.get_finished_spans() == ()


class Batches:
    """Batches that claim the scripted numbers of rows; one may set ``stop`` as it runs."""

    def __init__(self, claims: list[int], *, stop: asyncio.Event | None = None) -> None:
        self.claims = claims
        self.stop = stop
        self.ran: list[int] = []

    async def __call__(self) -> int:
        claimed = self.claims[len(self.ran)]
        if self.stop is not None and len(self.ran) == 1:
            self.stop.set()  # the signal arrives while the second batch's statement runs
        await asyncio.sleep(0)
        self.ran.append(claimed)
        return claimed


async def test_batches_run_until_one_is_short(clock: FixedClock) -> None:
    run = job_run(clock, trace.get_tracer(__name__))
    batches = Batches([3, 3, 2, 3])

    progress = await run.phases["only"].batches(limits(3, timedelta(hours=1)), batches)

    assert batches.ran == [3, 3, 2]
    assert (progress.batches, progress.rows, progress.largest_batch) == (3, 8, 3)


async def test_a_spent_run_budget_ends_the_batches_but_only_after_the_first(
    clock: FixedClock,
) -> None:
    # A run that began an hour ago has spent a one-minute budget before its first batch.
    run = job_run(clock, trace.get_tracer(__name__), started=time.monotonic() - 3600)
    batches = Batches([3, 3, 3])

    await run.phases["only"].batches(limits(3, timedelta(minutes=1)), batches)

    assert batches.ran == [3], "one batch of progress, then the budget ends the phase"


async def test_stop_during_a_batch_lets_it_finish_and_starts_no_other(clock: FixedClock) -> None:
    run = job_run(clock, trace.get_tracer(__name__))
    batches = Batches([3, 3, 3, 3], stop=run.stop)

    await run.phases["only"].batches(limits(3, timedelta(hours=1)), batches)

    assert batches.ran == [3, 3]


async def test_every_job_worker_is_built_from_its_settings_group(
    runtime: Runtime, settings_env: dict[str, str]
) -> None:
    custom: dict[str, str] = {}
    for n, group in enumerate(
        ("EXPIRE_SESSIONS", "SESSION_RETENTION", "ACTIVITY_CLOSER", "ACTIVITY_RETENTION")
    ):
        custom |= {
            f"PIN_{group}__POLLING_INTERVAL": str(100 + n),
            f"PIN_{group}__BATCH_SIZE": str(200 + n),
            f"PIN_{group}__MAX_RUN_DURATION": str(300 + n),
        }
    settings = load_settings({**settings_env, **custom})

    for name, build in JOB_WORKERS.items():
        registry = CollectorRegistry()
        worker = build(replace(runtime, settings=settings, registry=registry))
        group = getattr(settings, name.replace("-", "_"))
        assert worker.job.options is group, name
        assert worker.interval == group.polling_interval, name
        # The stalled alert reads the cadence from here (deploy/prometheus/jobs.yml).
        exported = registry.get_sample_value(
            f"{worker.spec.metric_prefix}_polling_interval_seconds"
        )
        assert exported == group.polling_interval.total_seconds(), name


@dataclass
class RowsJob:
    """One phase per run that changes ``rows`` rows, or fails; it remembers its run ids."""

    rows: int
    fails: bool = False
    spec: JobSpec = field(default_factory=lambda: rows_spec("change"))
    options: JobSettings = SCRIPTED_OPTIONS
    run_ids: list[str] = field(default_factory=list)

    async def run_once(self, now: datetime, run: JobRun) -> None:
        self.run_ids.append(str(run.id))

        async def change(phase: PhaseRun) -> None:
            if self.fails:
                raise ConnectionError("database went away")
            phase.add("rows", self.rows)

        await run.phase("change", change)


def lines_of_run(captured_logs: LogCapture, run_id: str) -> list[tuple[str, str]]:
    return [
        (event["event"], event["level"])
        for event in map(json.loads, captured_logs.lines())
        if event.get("jobRunId") == run_id
    ]


async def test_a_run_that_changed_nothing_logs_at_debug_and_its_metrics_still_count_it(
    clock: FixedClock, registry: CollectorRegistry, captured_logs: LogCapture
) -> None:
    """An idle worker is quiet at the default level: ``up`` prints nothing every tick."""
    job = RowsJob(rows=0)
    worker = PollingWorker(job, clock=clock, interval=timedelta(0), registry=registry)
    assert await worker.run_pass(asyncio.Event()) is not None
    assert lines_of_run(captured_logs, job.run_ids[-1]) == []  # nothing at info
    assert registry.get_sample_value("test_rows_last_success_timestamp_seconds") is not None

    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.DEBUG)
    try:
        assert await worker.run_pass(asyncio.Event()) is not None
    finally:
        root.setLevel(level)
    assert lines_of_run(captured_logs, job.run_ids[-1]) == [
        ("job started", "debug"),
        ("phase done", "debug"),
        ("job completed", "debug"),
    ]

    # A run that changed rows, or failed, reads as it always did: every line, at info.
    job.rows = 3
    assert await worker.run_pass(asyncio.Event()) is not None
    assert lines_of_run(captured_logs, job.run_ids[-1]) == [
        ("job started", "info"),
        ("phase done", "info"),
        ("job completed", "info"),
    ]
    job.fails = True
    assert await worker.run_pass(asyncio.Event()) is not None
    assert lines_of_run(captured_logs, job.run_ids[-1]) == [
        ("job started", "info"),
        ("phase failed", "warning"),
        ("job completed", "info"),
    ]


@dataclass
class BacklogJob:
    """Two phases that each say what they left (None: could not tell)."""

    left: tuple[int | None, int | None]
    spec: JobSpec = field(
        default_factory=lambda: JobSpec(
            name="backlogged",
            metric_prefix="test_backlogged",
            metrics=(run_duration("run duration"), backlog("left"), errors("failed")),
            phases=(Phase("a"), Phase("b")),
        )
    )
    options: JobSettings = SCRIPTED_OPTIONS

    async def run_once(self, now: datetime, run: JobRun) -> None:
        for name, left in zip(("a", "b"), self.left, strict=True):

            async def work(phase: PhaseRun, left: int | None = left) -> None:
                phase.remaining = left

            await run.phase(name, work)


async def test_the_runner_times_each_run_and_sets_the_backlog_only_when_every_phase_told(
    clock: FixedClock, registry: CollectorRegistry
) -> None:
    job = BacklogJob((2, 3))
    worker = PollingWorker(job, clock=clock, interval=timedelta(0), registry=registry)

    counted = await worker.run_pass(asyncio.Event())
    assert counted is not None and counted.to_json()["backlogRemaining"] == 5
    assert registry.get_sample_value("test_backlogged_backlog") == 5

    job.left = (1, None)
    unknown = await worker.run_pass(asyncio.Event())
    assert unknown is not None and unknown.to_json()["backlogRemaining"] is None
    assert registry.get_sample_value("test_backlogged_backlog") == 5, "the last full count stays"
    assert registry.get_sample_value("test_backlogged_run_duration_ms_count") == 2


@pytest.mark.parametrize(
    ("metrics", "counts", "message"),
    [
        ((counter("rows_total", "rows"),), (), "errors_total counter"),
        ((errors("failed"),), (Count("rows", "rows", counter="rows_total"),), "no such counter"),
        (
            (errors("failed"), counter("rows_total", "rows", labels=("table",))),
            (Count("rows", "rows", counter="rows_total"),),
            "no such counter",
        ),
        ((errors("failed"),), (Count("a", "same"), Count("b", "same")), "declared twice"),
    ],
)
def test_a_declaration_that_does_not_add_up_is_refused(
    metrics: tuple[Metric, ...], counts: tuple[Count, ...], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        JobSpec(name="bad", metric_prefix="bad", metrics=metrics, phases=(Phase("p", counts),))

"""The job runner behind every background job (STYLE 11, 19).

A job declares what it is (:class:`~pin_sessions.platform.job_spec.JobSpec`: its name,
metric prefix, metrics and phases with their counts) and does its work in
``run_once(now, run)``: its SQL and its decision, phase by phase. Everything else is the
runner's. :class:`PollingWorker` turns a job into a long-lived role:

* makes the job's metric objects from its spec, and its own
  (``<prefix>_last_success_timestamp_seconds``, set after every run that succeeded, so an
  alert can tell a stalled worker from an idle one; ``<prefix>_polling_interval_seconds``,
  the configured cadence, which that alert's threshold follows; ``<prefix>_failed_runs_total``);
* reads the injected clock only at the loop edges: ``now`` is fixed when a run starts
  and handed to the job, which decides with it; a job that stamps what each of its
  batches did (the closer's ``EndedAt``) reads ``run.now()`` at that batch's edge;
* opens one OpenTelemetry span per run carrying ``jobRunId``, binds ``jobRunId`` to
  every log line of the run, and logs ``job started`` / ``job completed`` (with the
  run's result);
* keeps an idle worker quiet: a run's lines are held back (:class:`RunLog`) until it
  changes a row, fails or is cut short by a stop; a run that did none of these logs them
  at debug when it ends (its metrics count it all the same);
* survives a failed run: the exception is logged (``job failed``) and counted, and the
  loop waits for the next tick; waits between runs on ``stop`` or the interval.

Inside a run, :meth:`JobRun.phase` runs one declared phase: skipped once ``stop`` is set,
else under a span ``<job> <phase>`` (``jobRunId``, ``phase`` and the phase's log counts),
logged ``phase done`` with its counts, or, when it raises, logged ``phase failed``,
counted in ``<prefix>_errors_total`` and absorbed, so the run goes on to its other
phases. The work gets a :class:`PhaseRun`: ``add`` counts committed rows (the declared
counter too), ``batches`` repeats a batch until one is short, the run budget
(``max_run_duration``) is spent or ``stop`` is set (:mod:`pin_sessions.platform.batching`),
``remaining`` says what the phase left. When the run ends the runner builds its
:class:`RunResult` — ``jobRunId``, every count by its key, ``durationMs`` and, for a job
with a backlog gauge, ``backlogRemaining`` — observes ``<prefix>_run_duration_ms`` and
sets ``<prefix>_backlog`` where the job declares them.

Graceful stop is cooperative: the worker never cancels a running pass. ``stop`` and the
budget are read between phases and batches only, so a statement that has started always
finishes and commits. ``--once`` is :meth:`PollingWorker.run_pass`: one run, whose
result's ``to_json()`` the CLI prints as one JSON object.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Protocol

import structlog
from opentelemetry import trace
from prometheus_client import CollectorRegistry, Counter, Gauge

from pin_sessions.platform.ids import new_id
from pin_sessions.platform.job_run import JobRun, PhaseRun, RunLog, RunResult
from pin_sessions.platform.job_spec import BACKLOG, RUN_DURATION, JobMetrics
from pin_sessions.platform.process import wait_or_stop

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer

    from pin_sessions.platform.clock import Clock
    from pin_sessions.platform.job_spec import JobSpec
    from pin_sessions.settings import PollingSettings

__all__ = [
    "Job",
    "JobRun",
    "PhaseRun",
    "PollingWorker",
    "RunLog",
    "RunResult",
    "WorkerMetrics",
    "lock_timeout_text",
]

log = structlog.get_logger(__name__)


class Job(Protocol):
    """One background job: its declaration, its settings group (its cadence; a batch job's
    batch size and run budget; its own knobs) and its pass."""

    @property
    def spec(self) -> JobSpec: ...

    @property
    def options(self) -> PollingSettings: ...

    async def run_once(self, now: datetime, run: JobRun) -> None: ...


@dataclass(frozen=True)
class WorkerMetrics:
    """The runner's own metrics, named after the job's prefix."""

    last_success: Gauge
    polling_interval: Gauge
    failed_runs: Counter

    @classmethod
    def register(cls, prefix: str, registry: CollectorRegistry) -> WorkerMetrics:
        return cls(
            last_success=Gauge(
                f"{prefix}_last_success_timestamp_seconds",
                "Unix time at which the last successful run ended",
                registry=registry,
            ),
            polling_interval=Gauge(
                f"{prefix}_polling_interval_seconds",
                "The configured pause between runs: the stalled alert's unit",
                registry=registry,
            ),
            failed_runs=Counter(
                f"{prefix}_failed_runs_total",
                "Runs that raised instead of returning a result",
                registry=registry,
            ),
        )


class PollingWorker:
    """Runs ``job`` every ``interval`` until ``stop``: a role for ``run_roles``."""

    def __init__(
        self,
        job: Job,
        *,
        clock: Clock,
        interval: timedelta,
        registry: CollectorRegistry,
        tracer: Tracer | None = None,
    ) -> None:
        self.job = job
        self.spec = job.spec
        self.name = f"job.{self.spec.name}"
        self._clock = clock
        self.interval = interval
        self.metrics = JobMetrics(self.spec, registry)
        self._worker_metrics = WorkerMetrics.register(self.spec.metric_prefix, registry)
        self._worker_metrics.polling_interval.set(interval.total_seconds())
        self._tracer = tracer or trace.get_tracer(__name__)

    async def run(self, stop: asyncio.Event) -> None:
        """A pass, then a wait on ``stop`` or the interval; a failed pass never ends the loop."""
        while not stop.is_set():
            await self.run_pass(stop)
            await wait_or_stop(stop, self.interval.total_seconds())

    async def run_pass(self, stop: asyncio.Event) -> RunResult | None:
        """One run of the job; ``None`` when it raised (logged and counted, not re-raised)."""
        run = JobRun(
            id=new_id(),
            spec=self.spec,
            metrics=self.metrics,
            stop=stop,
            tracer=self._tracer,
            clock=self._clock,
        )
        now = self._clock.now()
        with (
            structlog.contextvars.bound_contextvars(jobRunId=str(run.id)),
            self._tracer.start_as_current_span(
                f"job {self.spec.name}", attributes={"jobRunId": str(run.id)}
            ) as span,
        ):
            run.log.hold("job started", job=self.spec.name)
            try:
                await self.job.run_once(now, run)
            except Exception as exc:
                # A bug or an outage the job could not absorb: the next tick tries again.
                run.log.release()
                log.exception("job failed", job=self.spec.name, exception=repr(exc))
                span.record_exception(exc)
                span.set_status(trace.StatusCode.ERROR)
                self._worker_metrics.failed_runs.inc()
                return None
            result = run.result()
            self._record(result)
            run.log.end(
                "job completed", quiet=result.succeeded, job=self.spec.name, **result.to_json()
            )
            if result.succeeded:
                self._worker_metrics.last_success.set(self._clock.now().timestamp())
            else:
                span.set_status(trace.StatusCode.ERROR)
            return result

    def _record(self, result: RunResult) -> None:
        """The run's duration and backlog, where the job declares their metrics."""
        if self.metrics.has(RUN_DURATION):
            self.metrics.histogram(RUN_DURATION).observe(result.duration_ms)
        if self.metrics.has(BACKLOG) and result.backlog_remaining is not None:
            # Unknown (a phase could not count) keeps the last full measurement: half a
            # sum would look like a shrinking backlog.
            self.metrics.gauge(BACKLOG).set(result.backlog_remaining)


def lock_timeout_text(timeout: timedelta) -> str:
    """A duration as PostgreSQL's ``lock_timeout`` setting (whole milliseconds, at least 1)."""
    return f"{max(int(timeout.total_seconds() * 1000), 1)}ms"

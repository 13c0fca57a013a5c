"""The job runner behind every background job (STYLE 11, 19).

A job is an object with ``run_once(now, run)``: one pass over its work that returns a
result object. :class:`PollingWorker` turns it into a long-lived role:

* reads the injected clock only at the loop edges: ``now`` is fixed when a run starts
  and handed to the job, which decides with it; a job that stamps what each of its
  batches did (the closer's ``EndedAt``) reads ``run.now()`` at that batch's edge;
* opens one OpenTelemetry span per run carrying ``jobRunId``, binds ``jobRunId`` to
  every log line of the run, and logs ``job started`` / ``job completed``;
* keeps an idle worker quiet: a run's lines are held back (:class:`RunLog`) until it
  changes a row, fails or is cut short by a stop; a run that did none of these logs them
  at debug when it ends (its metrics count it all the same), so ``up`` on a quiet machine
  prints nothing each tick;
* survives a failed run: the exception is logged (``job failed``) and counted, and the
  loop waits for the next tick;
* waits between runs on ``stop`` or the polling interval, whichever comes first;
* sets ``<prefix>_last_success_timestamp_seconds`` after every run whose result says it
  succeeded, so an alert can tell a stalled worker from an idle one, and exports its
  interval as ``<prefix>_polling_interval_seconds``, so that alert's threshold follows the
  configured cadence instead of a number typed into the rule.

Inside a run, the :class:`JobRun` gives every job the same two mechanics, so a job is
only its SQL, its decision and its metrics:

* :meth:`JobRun.phase` runs one phase: skipped once ``stop`` is set, else under a span
  ``<job> <phase>`` (``jobRunId``, ``phase`` and the phase's counts), logged ``phase
  done`` with its counts, or, when it raises, logged ``phase failed``, counted in the
  job's errors counter and absorbed, so the run goes on to its other phases;
* :meth:`JobRun.batches` repeats a batch until one is short, the run budget
  (``max_run_duration``) is spent or ``stop`` is set.

Graceful stop is cooperative: the worker never cancels a running pass. ``stop`` and the
budget are read between phases and batches only, so a statement that has started always
finishes and commits.

``--once`` is :meth:`PollingWorker.run_pass`: one run, whose result ``to_json()`` the CLI
prints as one JSON object.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

import structlog
from opentelemetry import trace
from prometheus_client import CollectorRegistry, Counter, Gauge

from pin_sessions.platform.ids import new_id
from pin_sessions.platform.process import wait_or_stop

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer

    from pin_sessions.platform.clock import Clock
    from pin_sessions.platform.database import Connection
    from pin_sessions.settings import JobSettings, PollingSettings

log = structlog.get_logger(__name__)

# A keyset cursor's start: before any instant.
EARLIEST = datetime.min.replace(tzinfo=UTC)

# Buckets of the jobs' run-duration histograms, in ms: an empty pass to the 2-minute budget.
RUN_DURATION_BUCKETS_MS = (5, 20, 50, 100, 250, 500, 1000, 2500, 5000, 15000, 30000, 60000, 120000)


class JobResult(Protocol):
    """What a pass returns: its verdict and its JSON form (``--once`` output, log fields)."""

    @property
    def succeeded(self) -> bool: ...

    def to_json(self) -> dict[str, Any]: ...


ResultT = TypeVar("ResultT", bound=JobResult, covariant=True)
ResultV = TypeVar("ResultV", bound=JobResult)


@dataclass(kw_only=True)
class PhaseOutcome(ABC):
    """What one phase of a run did; a job's outcome adds its own counts."""

    phase: str
    failed: bool = False
    skipped: bool = False

    @abstractmethod
    def counts(self) -> dict[str, int]:
        """The fields of the ``phase done`` line, also set on the phase's span."""


OutcomeT = TypeVar("OutcomeT", bound=PhaseOutcome)


class RunLog:
    """A run's log lines, held back while the run has changed nothing.

    The first line that reports a change or a failure releases the held ones at info, in
    order, before itself; a run that ends without either logs them at debug. A busy run
    thus reads as it always did, and an idle one is silent at the default level.
    """

    def __init__(self) -> None:
        self._held: list[tuple[str, dict[str, Any]]] = []
        self.released = False

    def hold(self, event: str, **fields: Any) -> None:
        """A line that says nothing changed (yet): at info once the run shows it mattered."""
        if self.released:
            log.info(event, **fields)
        else:
            self._held.append((event, fields))

    def release(self) -> None:
        """The run changed something or failed: its held lines at info, from now on all."""
        if not self.released:
            self.released = True
            for event, fields in self._held:
                log.info(event, **fields)
            self._held.clear()

    def end(self, event: str, *, quiet: bool, **fields: Any) -> None:
        """The run's last line; ``quiet`` (nothing changed, nothing failed) puts it all at debug."""
        if quiet and not self.released:
            for held_event, held_fields in self._held:
                log.debug(held_event, **held_fields)
            self._held.clear()
            log.debug(event, **fields)
            return
        self.release()
        log.info(event, **fields)


@dataclass(frozen=True)
class JobRun:
    """One run as the job sees it: its id, the stop signal, a tracer, the clock, a stopwatch."""

    id: uuid.UUID
    job: str
    stop: asyncio.Event
    tracer: Tracer
    clock: Clock
    # Durations come from the monotonic clock: they measure, they decide nothing about
    # domain time, and the wall clock may jump.
    started: float = field(default_factory=time.monotonic)
    log: RunLog = field(default_factory=RunLog)

    @property
    def stopping(self) -> bool:
        return self.stop.is_set()

    def now(self) -> datetime:
        """The injected clock, read at a batch's edge; decisions keep the run's ``now``."""
        return self.clock.now()

    def elapsed(self) -> timedelta:
        return timedelta(seconds=time.monotonic() - self.started)

    def elapsed_ms(self) -> int:
        return int((time.monotonic() - self.started) * 1000)

    async def phase(
        self, outcome: OutcomeT, work: Callable[[], Awaitable[None]], *, errors: Counter
    ) -> OutcomeT:
        """Run ``work`` as the phase ``outcome`` records, unless ``stop`` is already set.

        A phase that raises (a lock timeout, a lost connection, ...) is marked failed,
        logged, counted in ``errors`` and recorded on its span; it does not end the run,
        because the phases of a job are independent and what one committed stays.
        """
        if self.stopping:
            outcome.skipped = True
            self.log.release()  # a run cut short by a stop is worth its lines
            return outcome
        with self.tracer.start_as_current_span(
            f"{self.job} {outcome.phase}",
            attributes={"jobRunId": str(self.id), "phase": outcome.phase},
        ) as span:
            try:
                await work()
            except Exception as exc:
                outcome.failed = True
                errors.inc()
                span.record_exception(exc)
                span.set_status(trace.StatusCode.ERROR)
                self.log.release()
                log.warning(
                    "phase failed", phase=outcome.phase, exception=f"{type(exc).__name__}: {exc}"
                )
            else:
                if any(outcome.counts().values()):
                    self.log.release()
                self.log.hold("phase done", phase=outcome.phase, **outcome.counts())
            span.set_attributes(outcome.counts())
        return outcome

    async def batches(self, limits: JobSettings, batch: Callable[[], Awaitable[int]]) -> None:
        """Run ``batch`` until one is short, the run budget is spent or ``stop`` is set.

        ``batch`` commits its work and returns how many rows it claimed: fewer than
        ``batch_size`` means no more are free (the rest, if any, are another instance's).
        The budget is read after a batch, never before the first, so every phase of a
        run makes some progress and none starves behind another (seed 000).
        """
        while not self.stopping:
            if await batch() < limits.batch_size or self.elapsed() >= limits.max_run_duration:
                return


@dataclass
class KeysetCursor:
    """Batches of one statement that walks an index from where its previous batch ended.

    The statement takes ``$1`` the bound its rows must not pass, ``$2`` the batch size
    and ``$3`` the cursor, and returns one row: how many rows it changed, and the highest
    key among them (null when none). Starting at the cursor spares each batch a rescan of
    the index entries its predecessors left behind.
    """

    statement: str
    bound: datetime
    reached: datetime = EARLIEST
    # The last batch's whole row, for a statement that returns more than these two.
    row: Any = None

    async def next(self, conn: Connection, batch_size: int) -> int:
        """One batch (its own transaction); how many rows it changed."""
        row = await conn.fetchrow(self.statement, self.bound, batch_size, self.reached)
        assert row is not None  # an aggregate always returns its row
        self.row = row
        self.reached = row[1] or self.reached
        changed: int = row[0]
        return changed


class Job(Protocol[ResultT]):
    """One background job: ``name`` for the CLI, ``metric_prefix`` for its metric names,
    ``options`` its settings group (its cadence; a batch job's batch size and run budget;
    its own knobs)."""

    @property
    def name(self) -> str: ...

    @property
    def metric_prefix(self) -> str: ...

    @property
    def options(self) -> PollingSettings: ...

    async def run_once(self, now: datetime, run: JobRun) -> ResultT: ...


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


class PollingWorker(Generic[ResultV]):
    """Runs ``job`` every ``interval`` until ``stop``: a role for ``run_roles``."""

    def __init__(
        self,
        job: Job[ResultV],
        *,
        clock: Clock,
        interval: timedelta,
        registry: CollectorRegistry,
        tracer: Tracer | None = None,
    ) -> None:
        self.job = job
        self.name = f"job.{job.name}"
        self._clock = clock
        self.interval = interval
        self._metrics = WorkerMetrics.register(job.metric_prefix, registry)
        self._metrics.polling_interval.set(interval.total_seconds())
        self._tracer = tracer or trace.get_tracer(__name__)

    async def run(self, stop: asyncio.Event) -> None:
        """A pass, then a wait on ``stop`` or the interval; a failed pass never ends the loop."""
        while not stop.is_set():
            await self.run_pass(stop)
            await wait_or_stop(stop, self.interval.total_seconds())

    async def run_pass(self, stop: asyncio.Event) -> ResultV | None:
        """One run of the job; ``None`` when it raised (logged and counted, not re-raised)."""
        run = JobRun(
            id=new_id(), job=self.job.name, stop=stop, tracer=self._tracer, clock=self._clock
        )
        now = self._clock.now()
        with (
            structlog.contextvars.bound_contextvars(jobRunId=str(run.id)),
            self._tracer.start_as_current_span(
                f"job {self.job.name}", attributes={"jobRunId": str(run.id)}
            ) as span,
        ):
            run.log.hold("job started", job=self.job.name)
            try:
                result = await self.job.run_once(now, run)
            except Exception as exc:
                # A bug or an outage the job could not absorb: the next tick tries again.
                run.log.release()
                log.exception("job failed", job=self.job.name, exception=repr(exc))
                span.record_exception(exc)
                span.set_status(trace.StatusCode.ERROR)
                self._metrics.failed_runs.inc()
                return None
            run.log.end(
                "job completed", quiet=result.succeeded, job=self.job.name, **result.to_json()
            )
            if result.succeeded:
                self._metrics.last_success.set(self._clock.now().timestamp())
            else:
                span.set_status(trace.StatusCode.ERROR)
            return result


def command_row_count(status: str) -> int:
    """Rows touched by a statement, from its command tag (``UPDATE 42``, ``DELETE 7``)."""
    return int(status.rsplit(" ", 1)[-1])


def lock_timeout_text(timeout: timedelta) -> str:
    """A duration as PostgreSQL's ``lock_timeout`` setting (whole milliseconds, at least 1)."""
    return f"{max(int(timeout.total_seconds() * 1000), 1)}ms"

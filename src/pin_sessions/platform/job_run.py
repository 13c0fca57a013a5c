"""One run of a job as its work sees it: :class:`JobRun`, its :class:`PhaseRun` s, its
:class:`RunResult`, and :class:`RunLog`, which keeps an idle run's lines quiet.

The runner's rules are told in :mod:`pin_sessions.platform.jobs`.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import structlog
from opentelemetry import trace

from pin_sessions.platform.batching import Batch, Progress, until_short
from pin_sessions.platform.job_spec import BACKLOG, ERRORS, JobMetrics, Phase

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer

    from pin_sessions.platform.clock import Clock
    from pin_sessions.platform.job_spec import JobSpec
    from pin_sessions.settings import JobSettings

# The runner's lines keep the logger name they have always had.
log = structlog.get_logger("pin_sessions.platform.jobs")


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


class PhaseRun:
    """One phase of one run, as its work sees it and as the result reports it."""

    def __init__(self, spec: Phase, run: JobRun) -> None:
        self.spec = spec
        self.name = spec.name
        self._run = run
        self.counts = {count.name: 0 for count in spec.counts}
        self.items: dict[str, list[str]] = {c.name: [] for c in spec.counts if c.listed}
        self._counters = {
            count.name: run.metrics.counter(count.counter, count.labels)
            for count in spec.counts
            if count.counter is not None
        }
        self.progress = Progress()
        self.failed = False
        self.skipped = False
        # What the phase left (its backlog), when it can tell; None: unknown.
        self.remaining: int | None = None

    def add(self, name: str, rows: int) -> None:
        """``rows`` more of the count ``name``, committed: its counter counts them now."""
        self.counts[name] += rows
        counter = self._counters.get(name)
        if counter is not None:
            counter.inc(rows)

    def add_items(self, name: str, items: Sequence[str]) -> None:
        """Items of a listed count (the result shows them; the count and counter, how many)."""
        self.items[name].extend(items)
        self.add(name, len(items))

    def log_counts(self) -> dict[str, int]:
        """The fields of the ``phase done`` line, also set on the phase's span."""
        return {count.log: self.counts[count.name] for count in self.spec.counts if count.log}

    async def batches(self, limits: JobSettings, batch: Batch) -> Progress:
        """``batch`` until one claims fewer than ``batch_size`` rows, the run's budget is
        spent or ``stop`` is set; read after a batch, never before the first, so every
        phase of a run makes some progress and none starves behind another (seed 000)."""
        deadline = self._run.started + limits.max_run_duration.total_seconds()
        return await until_short(
            batch,
            size=limits.batch_size,
            stop=self._run.stop,
            deadline=deadline,
            progress=self.progress,
        )

    async def batch(self, batch: Batch) -> int:
        """One batch, timed and counted in the phase's progress like those of ``batches``."""
        started = time.monotonic()
        rows = await batch()
        self.progress.record(rows, started)
        return rows


@dataclass(frozen=True)
class RunResult:
    """What a run did, built by the runner from its phases."""

    spec: JobSpec
    job_run_id: uuid.UUID
    phases: Mapping[str, PhaseRun]
    duration_ms: int

    @property
    def succeeded(self) -> bool:
        return not any(phase.failed for phase in self.phases.values())

    @property
    def backlog_remaining(self) -> int | None:
        """What every phase left, summed; None unless each could tell."""
        left = [phase.remaining for phase in self.phases.values()]
        if any(remaining is None for remaining in left):
            return None
        return sum(remaining for remaining in left if remaining is not None)

    def count(self, key: str) -> int:
        """The count reported under ``key`` in :meth:`to_json`."""
        for phase in self.phases.values():
            for count in phase.spec.counts:
                if count.key == key:
                    return phase.counts[count.name]
        raise KeyError(key)

    def to_json(self) -> dict[str, Any]:
        """``--once`` output and the ``job completed`` line's fields: SPEC names, in order."""
        document: dict[str, Any] = {"jobRunId": str(self.job_run_id)}
        for phase in self.phases.values():
            for count in phase.spec.counts:
                value = phase.items[count.name] if count.listed else phase.counts[count.name]
                document[count.key] = value
        document["durationMs"] = self.duration_ms
        if any(metric.name == BACKLOG for metric in self.spec.metrics):
            document["backlogRemaining"] = self.backlog_remaining
        return document


@dataclass
class JobRun:
    """One run as the job sees it: its id, the stop signal, a tracer, the clock, a stopwatch,
    the job's metrics and its phases."""

    id: uuid.UUID
    spec: JobSpec
    metrics: JobMetrics
    stop: asyncio.Event
    tracer: Tracer
    clock: Clock
    # Durations come from the monotonic clock: they measure, they decide nothing about
    # domain time, and the wall clock may jump.
    started: float = field(default_factory=time.monotonic)
    log: RunLog = field(default_factory=RunLog)
    phases: dict[str, PhaseRun] = field(init=False)

    def __post_init__(self) -> None:
        self.phases = {phase.name: PhaseRun(phase, self) for phase in self.spec.phases}

    @property
    def job(self) -> str:
        return self.spec.name

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

    async def phase(self, name: str, work: Callable[[PhaseRun], Awaitable[None]]) -> PhaseRun:
        """Run ``work`` as the declared phase ``name``, unless ``stop`` is already set.

        A phase that raises (a lock timeout, a lost connection, ...) is marked failed,
        logged, counted in the errors counter and recorded on its span; it does not end
        the run, because the phases of a job are independent and what one committed stays.
        """
        phase = self.phases[name]
        if self.stopping:
            phase.skipped = True
            self.log.release()  # a run cut short by a stop is worth its lines
            return phase
        with self.tracer.start_as_current_span(
            f"{self.job} {name}", attributes={"jobRunId": str(self.id), "phase": name}
        ) as span:
            try:
                await work(phase)
            except Exception as exc:
                phase.failed = True
                self.metrics.counter(ERRORS, phase.spec.error_labels).inc()
                span.record_exception(exc)
                span.set_status(trace.StatusCode.ERROR)
                self.log.release()
                log.warning("phase failed", phase=name, exception=f"{type(exc).__name__}: {exc}")
            else:
                if any(phase.log_counts().values()):
                    self.log.release()
                self.log.hold("phase done", phase=name, **phase.log_counts())
            span.set_attributes(phase.log_counts())
        return phase

    def result(self) -> RunResult:
        return RunResult(self.spec, self.id, self.phases, duration_ms=self.elapsed_ms())

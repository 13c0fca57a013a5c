"""ActivityCloserJob (seed 004): close Active sessions idle for over InactivityThreshold.

One phase, ``close``, deciding with the ``now`` fixed when the run started: a session is
idle when ``last_activity_at < now - inactivity_threshold``. What a batch writes is
stamped with the time of that batch (SPEC §6): ``EndedAt`` and the events' ``CreatedAt``
say when the session was really closed, not when a long run began. The run works in batches,
each one transaction that claims at most ``batch_size`` idle sessions through
``ix_sessions_active_last_activity`` with ``FOR UPDATE SKIP LOCKED`` and hands them to
:func:`~pin_sessions.user_activity.closing.close_sessions`, the one close operation that
link's force-close uses too. So parallel instances take disjoint batches, and a session
ends at most once whoever races to close it (INV-SES-006).

Races with the device: a heartbeat that committed before the batch keeps its session
open, because the close UPDATE re-checks the threshold (``idle_before``); a heartbeat
that arrives while the batch holds the row waits, then matches no Active session and
starts a new one (INV-SES-003).

The job runner (:mod:`pin_sessions.platform.jobs`) repeats the batches: ``stop`` and
``max_run_duration`` are read between batches, never inside one, and what is left is
reported as ``backlogRemaining`` for the next tick. A failed batch rolls back whole (its
sessions stay Active for the next tick), is logged and counted, and ends the run.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

import structlog
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from pin_sessions.platform.jobs import RUN_DURATION_BUCKETS_MS, PhaseOutcome
from pin_sessions.settings import ActivityCloserSettings
from pin_sessions.user_activity import sql
from pin_sessions.user_activity.closing import close_sessions

if TYPE_CHECKING:
    import uuid
    from datetime import datetime

    from pin_sessions.platform.database import Database
    from pin_sessions.platform.jobs import JobRun

log = structlog.get_logger(__name__)

PHASE = "close"


@dataclass(frozen=True)
class ActivityCloserMetrics:
    closed: Counter
    views_closed: Counter
    run_duration_ms: Histogram
    backlog: Gauge
    errors: Counter

    @classmethod
    def register(cls, registry: CollectorRegistry) -> ActivityCloserMetrics:
        return cls(
            closed=Counter(
                "user_activity_activity_closer_closed_total",
                "Sessions moved Active → Inactive for inactivity",
                registry=registry,
            ),
            views_closed=Counter(
                "user_activity_activity_closer_views_closed_total",
                "Open property views ended with their idle session",
                registry=registry,
            ),
            run_duration_ms=Histogram(
                "user_activity_activity_closer_run_duration_ms",
                "Duration of one ActivityCloserJob run in milliseconds",
                registry=registry,
                buckets=RUN_DURATION_BUCKETS_MS,
            ),
            backlog=Gauge(
                "user_activity_activity_closer_backlog",
                "Active sessions past the inactivity threshold, at the end of a run",
                registry=registry,
            ),
            errors=Counter(
                "user_activity_activity_closer_errors_total",
                "Failed batches (lost connection, lock or statement timeout, ...)",
                registry=registry,
            ),
        )


@dataclass(kw_only=True)
class ActivityCloserResult(PhaseOutcome):
    """One run, which is its one phase; ``backlog_remaining`` is None when not counted."""

    job_run_id: uuid.UUID
    closed: int = 0
    views_closed: int = 0
    batches: int = 0
    longest_batch_ms: float = 0.0
    backlog_remaining: int | None = None
    duration_ms: int = 0

    @property
    def succeeded(self) -> bool:
        return not self.failed

    def counts(self) -> dict[str, int]:
        return {"closedCount": self.closed, "viewsClosedCount": self.views_closed}

    def to_json(self) -> dict[str, Any]:
        return {
            "jobRunId": str(self.job_run_id),
            "closed": self.closed,
            "viewsClosed": self.views_closed,
            "durationMs": self.duration_ms,
            "backlogRemaining": self.backlog_remaining,
        }


@dataclass
class ActivityCloserJob:
    """Seed 004's activity-closer; a :class:`~pin_sessions.platform.jobs.PollingWorker` runs it."""

    database: Database
    options: ActivityCloserSettings
    metrics: ActivityCloserMetrics
    name: str = field(default="activity-closer", init=False)
    metric_prefix: str = field(default="user_activity_activity_closer", init=False)

    async def run_once(self, now: datetime, run: JobRun) -> ActivityCloserResult:
        """Batches until one is short, the budget is spent or ``stop`` is set; then the backlog."""
        idle_before = now - self.options.inactivity_threshold
        result = ActivityCloserResult(phase=PHASE, job_run_id=run.id)

        async def batch() -> int:
            return await self._close_batch(run.now(), idle_before, result)

        close = partial(run.batches, self.options, batch)
        await run.phase(result, close, errors=self.metrics.errors)
        result.backlog_remaining = await self._count_backlog(idle_before)
        result.duration_ms = run.elapsed_ms()
        self.metrics.run_duration_ms.observe(result.duration_ms)
        return result

    async def _close_batch(
        self, ended_at: datetime, idle_before: datetime, result: ActivityCloserResult
    ) -> int:
        """One transaction: claim a batch, close it at ``ended_at``; returns how many it claimed.

        A short claim ends the run: every other idle session is held by another closer or
        a linker, which will end it.
        """
        started = time.monotonic()
        async with self.database.transaction() as conn:
            rows = await conn.fetch(sql.CLAIM_IDLE_SESSIONS, idle_before, self.options.batch_size)
            closed = await close_sessions(
                conn, [row["id"] for row in rows], now=ended_at, idle_before=idle_before
            )
        # Counted only once committed: a rolled-back batch closed nothing.
        result.batches += 1
        result.closed += len(closed.session_ids)
        result.views_closed += closed.views_closed
        result.longest_batch_ms = max(result.longest_batch_ms, (time.monotonic() - started) * 1000)
        self.metrics.closed.inc(len(closed.session_ids))
        self.metrics.views_closed.inc(closed.views_closed)
        return len(rows)

    async def _count_backlog(self, idle_before: datetime) -> int | None:
        try:
            async with self.database.connection() as conn:
                backlog: int = await conn.fetchval(sql.COUNT_IDLE_SESSIONS, idle_before)
        except Exception as exc:
            # The run's work is committed; only the gauge misses this tick.
            log.warning("backlog not counted", exception=f"{type(exc).__name__}: {exc}")
            return None
        self.metrics.backlog.set(backlog)
        return backlog


def build_activity_closer_job(
    database: Database, options: ActivityCloserSettings, registry: CollectorRegistry
) -> ActivityCloserJob:
    return ActivityCloserJob(database, options, ActivityCloserMetrics.register(registry))

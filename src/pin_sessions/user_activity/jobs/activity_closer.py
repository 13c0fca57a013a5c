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

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import structlog

from pin_sessions.platform.job_spec import (
    Count,
    JobSpec,
    Phase,
    backlog,
    counter,
    errors,
    run_duration,
)
from pin_sessions.settings import ActivityCloserSettings
from pin_sessions.user_activity import repository
from pin_sessions.user_activity.closing import close_sessions

if TYPE_CHECKING:
    from datetime import datetime

    from pin_sessions.platform.database import Database
    from pin_sessions.platform.jobs import JobRun, PhaseRun

log = structlog.get_logger(__name__)

PHASE = "close"

SPEC = JobSpec(
    name="activity-closer",
    metric_prefix="user_activity_activity_closer",
    metrics=(
        counter("closed_total", "Sessions moved Active → Inactive for inactivity"),
        counter("views_closed_total", "Open property views ended with their idle session"),
        run_duration("Duration of one ActivityCloserJob run in milliseconds"),
        backlog("Active sessions past the inactivity threshold, at the end of a run"),
        errors("Failed batches (lost connection, lock or statement timeout, ...)"),
    ),
    phases=(
        Phase(
            PHASE,
            counts=(
                Count("closed", "closed", log="closedCount", counter="closed_total"),
                Count(
                    "views_closed",
                    "viewsClosed",
                    log="viewsClosedCount",
                    counter="views_closed_total",
                ),
            ),
        ),
    ),
)


@dataclass
class ActivityCloserJob:
    """Seed 004's activity-closer; a :class:`~pin_sessions.platform.jobs.PollingWorker` runs it."""

    database: Database
    options: ActivityCloserSettings
    spec: ClassVar[JobSpec] = SPEC

    async def run_once(self, now: datetime, run: JobRun) -> None:
        """Batches until one is short, the budget is spent or ``stop`` is set; then the backlog."""
        idle_before = now - self.options.inactivity_threshold

        async def close(phase: PhaseRun) -> None:
            async def batch() -> int:
                return await self._close_batch(run.now(), idle_before, phase)

            await phase.batches(self.options, batch)

        phase = await run.phase(PHASE, close)
        phase.remaining = await self._count_backlog(idle_before)

    async def _close_batch(self, ended_at: datetime, idle_before: datetime, phase: PhaseRun) -> int:
        """One transaction: claim a batch, close it at ``ended_at``; returns how many it claimed.

        A short claim ends the run: every other idle session is held by another closer or
        a linker, which will end it.
        """
        async with self.database.transaction() as conn:
            claimed = await repository.claim_idle_sessions(
                conn, idle_before, self.options.batch_size
            )
            closed = await close_sessions(conn, claimed, now=ended_at, idle_before=idle_before)
        # Counted only once committed: a rolled-back batch closed nothing.
        phase.add("closed", len(closed.session_ids))
        phase.add("views_closed", closed.views_closed)
        return len(claimed)

    async def _count_backlog(self, idle_before: datetime) -> int | None:
        try:
            async with self.database.connection() as conn:
                backlog = await repository.count_idle_sessions(conn, idle_before)
        except Exception as exc:
            # The run's work is committed; only the gauge misses this tick.
            log.warning("backlog not counted", exception=f"{type(exc).__name__}: {exc}")
            return None
        return backlog


def build_activity_closer_job(
    database: Database, options: ActivityCloserSettings
) -> ActivityCloserJob:
    return ActivityCloserJob(database, options)

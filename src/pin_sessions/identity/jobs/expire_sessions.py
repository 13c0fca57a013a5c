"""ExpireSessionsJob (seed 000): materialise the expiry of refresh sessions and SICR.

Two independent phases, ``refresh`` (Active → Expired) and ``sicr`` (Pending → Expired),
both deciding with the ``now`` fixed when the run started. The status guard is part of
every UPDATE, so a repeat, a second instance or a racing confirm/refresh can never flip
a row twice: whoever changes the status first wins, the other matches nothing. Only the
status column changes and nothing is published: expiry is silent (SPEC §3), and the
operations check ``expires_at`` themselves, so a late run opens no security window.

A phase first counts its backlog through the partial index. Up to ``batch_size`` rows it
runs one set-based UPDATE; above that it works in chunks, each claiming at most
``batch_size`` rows with ``FOR NO KEY UPDATE SKIP LOCKED`` and committing on its own, so
parallel instances take disjoint portions and no transaction holds more row locks than
that. The job runner (:mod:`pin_sessions.platform.jobs`) runs the phases and the chunks:
a failed phase is logged and counted while the other still runs; ``stop`` and
``max_run_duration`` are read between chunks, and each phase gets at least one chunk
per run, so a huge refresh backlog cannot starve SICR.

Seed 000's SLO is observable per phase: each flipped row's lag (the flip's time less its
``expires_at``) goes into ``identity_expire_sessions_flip_lag_seconds{phase}``, and each
run sets ``identity_expire_sessions_oldest_overdue_seconds{phase}``, the run's ``now`` less
the oldest ``expires_at`` still under the guard (0 when none), read as the first entry of
the phase's partial index. The alerts compare both with the polling interval.

Seed 000's own metrics are single series, without a phase label. A run ends by counting what
is left: a phase that was skipped by a stop or failed is counted afresh then (a cheap
index count), so ``backlogRemaining`` and the backlog gauge always cover both phases.
Should even that count fail (the database is gone), a failed phase falls back to its
backlog minus what it expired, and a phase never counted makes the run's total unknown:
``backlogRemaining`` is null and the gauge keeps the last full measurement, since half a
sum would look like a shrinking backlog. The oldest overdue row is read with each count;
a phase whose read failed keeps its last gauge value. The run span itself (opened by the
worker) gets the run's ``expiredCount``, both phases together.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, ClassVar

import structlog
from opentelemetry import trace

from pin_sessions.identity import repository
from pin_sessions.identity.repository import Expiry
from pin_sessions.platform.job_spec import (
    Count,
    JobSpec,
    Phase,
    backlog,
    counter,
    errors,
    gauge,
    histogram,
    run_duration,
)
from pin_sessions.platform.jobs import JobRun, PhaseRun, lock_timeout_text
from pin_sessions.settings import ExpireSessionsSettings

if TYPE_CHECKING:
    from pin_sessions.platform.database import Connection, Database

log = structlog.get_logger(__name__)

REFRESH = "refresh"
SICR = "sicr"
# Seconds from expires_at to the flip. The SLO's bound is PollingInterval + the update's
# time (5-6 min by default), its alert's 2 x PollingInterval: both fall on a bound.
FLIP_LAG_BUCKETS = (1, 10, 30, 60, 120, 180, 300, 360, 600, 900, 1800, 3600, 21600, 86400)
OLDEST_OVERDUE = "oldest_overdue_seconds"
FLIP_LAG = "flip_lag_seconds"

# Seed 000's metric names, each a single series; its SLO's two, by phase.
SPEC = JobSpec(
    name="expire-sessions",
    metric_prefix="identity_expire_sessions",
    metrics=(
        counter("refresh_expired_total", "Refresh sessions moved Active → Expired"),
        counter("sicr_expired_total", "Sign-in confirmation requests moved Pending → Expired"),
        run_duration("Duration of one ExpireSessionsJob run in milliseconds"),
        backlog(
            "Rows under the guard with expires_at <= now not yet Expired, both phases, "
            "at the end of the last run that counted both"
        ),
        errors("Failed phases (lock timeout, lost connection, ...)"),
        gauge(
            OLDEST_OVERDUE,
            "The last run's now less the oldest expires_at still Active (refresh) or "
            "Pending (sicr); 0 when none is past it",
            labels=("phase",),
        ),
        histogram(
            FLIP_LAG,
            "Seconds from each flipped row's expires_at to its flip to Expired",
            labels=("phase",),
            buckets=FLIP_LAG_BUCKETS,
            # Every phase's series exists from the start, so a rate or an absence is real.
            series=((REFRESH,), (SICR,)),
        ),
    ),
    phases=(
        Phase(
            REFRESH,
            counts=(
                Count(
                    "expired", "refreshExpired", log="expiredCount", counter="refresh_expired_total"
                ),
            ),
        ),
        Phase(
            SICR,
            counts=(
                Count("expired", "sicrExpired", log="expiredCount", counter="sicr_expired_total"),
            ),
        ),
    ),
)


@dataclass(frozen=True)
class ExpiryPhase:
    name: str
    statements: Expiry


PHASES = (
    ExpiryPhase(REFRESH, repository.REFRESH_EXPIRY),
    ExpiryPhase(SICR, repository.SICR_EXPIRY),
)


@dataclass
class ExpireSessionsJob:
    """Seed 000's job; a :class:`~pin_sessions.platform.jobs.PollingWorker` runs it."""

    database: Database
    options: ExpireSessionsSettings
    spec: ClassVar[JobSpec] = SPEC

    async def run_once(self, now: datetime, run: JobRun) -> None:
        """Each phase unless stopping, then what is left, then the SLO's gauges."""
        # Each phase's oldest overdue row in seconds, as its last count read it.
        oldest: dict[str, float] = {}
        for phase in PHASES:
            await run.phase(phase.name, partial(self._expire, phase, now, run, oldest))
        for phase in PHASES:
            outcome = run.phases[phase.name]
            if outcome.skipped or outcome.failed:
                await self._recount(phase, now, outcome, oldest)
        # A phase whose count failed keeps its last gauge value.
        for name, seconds in oldest.items():
            run.metrics.gauge(OLDEST_OVERDUE, (name,)).set(seconds)
        # The worker's run span is the current one here: SPEC §7 wants the count on it.
        expired = sum(outcome.counts["expired"] for outcome in run.phases.values())
        trace.get_current_span().set_attribute("expiredCount", expired)

    async def _expire(
        self,
        phase: ExpiryPhase,
        now: datetime,
        run: JobRun,
        oldest: dict[str, float],
        outcome: PhaseRun,
    ) -> None:
        lock_timeout = lock_timeout_text(self.options.lock_timeout)
        async with (
            self.database.connection() as conn,
            repository.lock_timeout(conn, lock_timeout),
        ):
            backlog = await repository.count_expired(conn, phase.statements, now)
            # What the phase reports left should a statement below fail: the backlog,
            # less each statement's rows as it commits (see _record).
            outcome.remaining = backlog
            if backlog > self.options.batch_size:
                cursor = repository.expiry_chunks(phase.statements, now)

                async def chunk() -> int:
                    flipped = await cursor.next(conn, self.options.batch_size)
                    self._record(run, outcome, cursor.row["expired"] or (), run.now())
                    return flipped

                await outcome.batches(self.options, chunk)
            elif backlog > 0:

                async def expire_all() -> int:
                    expired = await repository.expire_all(conn, phase.statements, now)
                    self._record(run, outcome, expired, run.now())
                    return len(expired)

                await outcome.batch(expire_all)
            await _measure(conn, phase, now, outcome, oldest)

    def _record(
        self, run: JobRun, outcome: PhaseRun, expired: Sequence[datetime], flipped_at: datetime
    ) -> None:
        """Count a committed statement (each is its own transaction) before the next runs:
        its rows, ``expired`` (their ``expires_at``), flipped at ``flipped_at``."""
        lag = run.metrics.histogram(FLIP_LAG, (outcome.name,))
        for expires_at in expired:
            lag.observe((flipped_at - expires_at).total_seconds())
        outcome.add("expired", len(expired))
        if outcome.remaining is not None:
            outcome.remaining = max(outcome.remaining - len(expired), 0)

    async def _recount(
        self, phase: ExpiryPhase, now: datetime, outcome: PhaseRun, oldest: dict[str, float]
    ) -> None:
        """What a skipped or failed phase left; its estimate (if any) stays when this fails."""
        try:
            async with self.database.connection() as conn:
                await _measure(conn, phase, now, outcome, oldest)
        except Exception as exc:
            log.warning(
                "backlog not counted", phase=phase.name, exception=f"{type(exc).__name__}: {exc}"
            )


async def _measure(
    conn: Connection,
    phase: ExpiryPhase,
    now: datetime,
    outcome: PhaseRun,
    oldest: dict[str, float],
) -> None:
    """What the phase leaves at ``now``: how many rows, how long past expiry the oldest is."""
    outcome.remaining = await repository.count_expired(conn, phase.statements, now)
    first = await repository.oldest_expired(conn, phase.statements, now)
    oldest[phase.name] = 0.0 if first is None else (now - first).total_seconds()


def build_expire_sessions_job(
    database: Database, options: ExpireSessionsSettings
) -> ExpireSessionsJob:
    return ExpireSessionsJob(database, options)

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

import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Any

import structlog
from opentelemetry import trace
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from pin_sessions.identity import sql
from pin_sessions.platform.jobs import (
    RUN_DURATION_BUCKETS_MS,
    JobRun,
    KeysetCursor,
    PhaseOutcome,
    lock_timeout_text,
)
from pin_sessions.settings import ExpireSessionsSettings

if TYPE_CHECKING:
    import uuid

    from pin_sessions.platform.database import Connection, Database

log = structlog.get_logger(__name__)

REFRESH = "refresh"
SICR = "sicr"
# Seconds from expires_at to the flip. The SLO's bound is PollingInterval + the update's
# time (5-6 min by default), its alert's 2 x PollingInterval: both fall on a bound.
FLIP_LAG_BUCKETS = (1, 10, 30, 60, 120, 180, 300, 360, 600, 900, 1800, 3600, 21600, 86400)


@dataclass(frozen=True)
class ExpiryPhase:
    name: str
    count_sql: str
    oldest_sql: str
    expire_sql: str
    expire_chunk_sql: str


PHASES = (
    ExpiryPhase(
        REFRESH,
        sql.COUNT_EXPIRED_REFRESH_SESSIONS,
        sql.OLDEST_EXPIRED_REFRESH_SESSION,
        sql.EXPIRE_REFRESH_SESSIONS,
        sql.EXPIRE_REFRESH_SESSIONS_CHUNK,
    ),
    ExpiryPhase(
        SICR,
        sql.COUNT_EXPIRED_SICR,
        sql.OLDEST_EXPIRED_SICR,
        sql.EXPIRE_SICR,
        sql.EXPIRE_SICR_CHUNK,
    ),
)


@dataclass(frozen=True)
class ExpireSessionsMetrics:
    """Seed 000's metric names, each a single series; its SLO's two, by phase."""

    expired: dict[str, Counter]
    run_duration_ms: Histogram
    backlog: Gauge
    errors: Counter
    oldest_overdue: Gauge
    flip_lag: Histogram

    @classmethod
    def register(cls, registry: CollectorRegistry) -> ExpireSessionsMetrics:
        metrics = cls(
            expired={
                REFRESH: Counter(
                    "identity_expire_sessions_refresh_expired_total",
                    "Refresh sessions moved Active → Expired",
                    registry=registry,
                ),
                SICR: Counter(
                    "identity_expire_sessions_sicr_expired_total",
                    "Sign-in confirmation requests moved Pending → Expired",
                    registry=registry,
                ),
            },
            run_duration_ms=Histogram(
                "identity_expire_sessions_run_duration_ms",
                "Duration of one ExpireSessionsJob run in milliseconds",
                registry=registry,
                buckets=RUN_DURATION_BUCKETS_MS,
            ),
            backlog=Gauge(
                "identity_expire_sessions_backlog",
                "Rows under the guard with expires_at <= now not yet Expired, both phases, "
                "at the end of the last run that counted both",
                registry=registry,
            ),
            errors=Counter(
                "identity_expire_sessions_errors_total",
                "Failed phases (lock timeout, lost connection, ...)",
                registry=registry,
            ),
            oldest_overdue=Gauge(
                "identity_expire_sessions_oldest_overdue_seconds",
                "The last run's now less the oldest expires_at still Active (refresh) or "
                "Pending (sicr); 0 when none is past it",
                ["phase"],
                registry=registry,
            ),
            flip_lag=Histogram(
                "identity_expire_sessions_flip_lag_seconds",
                "Seconds from each flipped row's expires_at to its flip to Expired",
                ["phase"],
                registry=registry,
                buckets=FLIP_LAG_BUCKETS,
            ),
        )
        for phase in PHASES:
            # Every phase's series exists from the start, so a rate or an absence is real.
            metrics.flip_lag.labels(phase.name)
        return metrics


@dataclass(kw_only=True)
class ExpiryOutcome(PhaseOutcome):
    """What one phase did; ``remaining`` is None when it could not be counted."""

    expired: int = 0
    remaining: int | None = None
    # Seconds; None when it could not be read.
    oldest_overdue: float | None = None
    chunks: int = 0
    longest_statement_ms: float = 0.0

    def counts(self) -> dict[str, int]:
        return {"expiredCount": self.expired}


@dataclass(frozen=True)
class ExpireSessionsResult:
    job_run_id: uuid.UUID
    refresh: ExpiryOutcome
    sicr: ExpiryOutcome
    duration_ms: int

    @property
    def succeeded(self) -> bool:
        return not (self.refresh.failed or self.sicr.failed)

    @property
    def backlog_remaining(self) -> int | None:
        """The rows left over both phases; None unless both were counted."""
        if self.refresh.remaining is None or self.sicr.remaining is None:
            return None
        return self.refresh.remaining + self.sicr.remaining

    @property
    def expired(self) -> int:
        return self.refresh.expired + self.sicr.expired

    def to_json(self) -> dict[str, Any]:
        return {
            "jobRunId": str(self.job_run_id),
            "refreshExpired": self.refresh.expired,
            "sicrExpired": self.sicr.expired,
            "durationMs": self.duration_ms,
            "backlogRemaining": self.backlog_remaining,
        }


@dataclass
class ExpireSessionsJob:
    """Seed 000's job; a :class:`~pin_sessions.platform.jobs.PollingWorker` runs it."""

    database: Database
    options: ExpireSessionsSettings
    metrics: ExpireSessionsMetrics
    name: str = field(default="expire-sessions", init=False)
    metric_prefix: str = field(default="identity_expire_sessions", init=False)

    async def run_once(self, now: datetime, run: JobRun) -> ExpireSessionsResult:
        """One pass: each phase unless stopping, then what is left, then the run's metrics."""
        outcomes = {}
        for phase in PHASES:
            outcome = outcomes[phase.name] = ExpiryOutcome(phase=phase.name)
            work = partial(self._expire, phase, now, run, outcome)
            await run.phase(outcome, work, errors=self.metrics.errors)
        for phase in PHASES:
            outcome = outcomes[phase.name]
            if outcome.skipped or outcome.failed:
                await self._recount(phase, now, outcome)
        result = ExpireSessionsResult(
            run.id, outcomes[REFRESH], outcomes[SICR], duration_ms=run.elapsed_ms()
        )
        for name, outcome in outcomes.items():
            if outcome.oldest_overdue is not None:
                self.metrics.oldest_overdue.labels(name).set(outcome.oldest_overdue)
        self.metrics.run_duration_ms.observe(result.duration_ms)
        if result.backlog_remaining is not None:
            self.metrics.backlog.set(result.backlog_remaining)
        # The worker's run span is the current one here: SPEC §7 wants the count on it.
        trace.get_current_span().set_attribute("expiredCount", result.expired)
        return result

    async def _expire(
        self, phase: ExpiryPhase, now: datetime, run: JobRun, outcome: ExpiryOutcome
    ) -> None:
        async with self.database.connection() as conn, _lock_timeout(conn, self.options):
            backlog: int = await conn.fetchval(phase.count_sql, now)
            # What the phase reports left should a statement below fail: the backlog,
            # less each statement's rows as it commits (see _record).
            outcome.remaining = backlog
            if backlog > self.options.batch_size:
                await self._expire_in_chunks(conn, phase, now, run, outcome)
            elif backlog > 0:
                started = time.monotonic()
                expired = await conn.fetchval(phase.expire_sql, now)
                self._record(outcome, expired or (), started, run.now())
            await _measure(conn, phase, now, outcome)

    async def _expire_in_chunks(
        self,
        conn: Connection,
        phase: ExpiryPhase,
        now: datetime,
        run: JobRun,
        outcome: ExpiryOutcome,
    ) -> None:
        cursor = KeysetCursor(phase.expire_chunk_sql, now)

        async def chunk() -> int:
            started = time.monotonic()
            flipped = await cursor.next(conn, self.options.batch_size)
            self._record(outcome, cursor.row["expired"] or (), started, run.now())
            return flipped

        await run.batches(self.options, chunk)

    def _record(
        self,
        outcome: ExpiryOutcome,
        expired: Sequence[datetime],
        started: float,
        flipped_at: datetime,
    ) -> None:
        """Count a committed statement (each is its own transaction) before the next runs:
        its rows, ``expired`` (their ``expires_at``), flipped at ``flipped_at``."""
        flipped = len(expired)
        lag = self.metrics.flip_lag.labels(outcome.phase)
        for expires_at in expired:
            lag.observe((flipped_at - expires_at).total_seconds())
        outcome.chunks += 1
        outcome.expired += flipped
        if outcome.remaining is not None:
            outcome.remaining = max(outcome.remaining - flipped, 0)
        elapsed_ms = (time.monotonic() - started) * 1000
        outcome.longest_statement_ms = max(outcome.longest_statement_ms, elapsed_ms)
        self.metrics.expired[outcome.phase].inc(flipped)

    async def _recount(self, phase: ExpiryPhase, now: datetime, outcome: ExpiryOutcome) -> None:
        """What a skipped or failed phase left; its estimate (if any) stays when this fails."""
        try:
            async with self.database.connection() as conn:
                await _measure(conn, phase, now, outcome)
        except Exception as exc:
            log.warning(
                "backlog not counted", phase=phase.name, exception=f"{type(exc).__name__}: {exc}"
            )


async def _measure(
    conn: Connection, phase: ExpiryPhase, now: datetime, outcome: ExpiryOutcome
) -> None:
    """What the phase leaves at ``now``: how many rows, how long past expiry the oldest is."""
    outcome.remaining = await conn.fetchval(phase.count_sql, now)
    oldest: datetime | None = await conn.fetchval(phase.oldest_sql, now)
    outcome.oldest_overdue = 0.0 if oldest is None else (now - oldest).total_seconds()


@asynccontextmanager
async def _lock_timeout(conn: Connection, options: ExpireSessionsSettings) -> AsyncIterator[None]:
    """The phase's lock_timeout on its connection, taken off again before the pool has it back.

    A pool need not reset its connections (the API's does not): whoever changes a session
    setting puts it back.
    """
    await conn.execute(sql.SET_LOCK_TIMEOUT, lock_timeout_text(options.lock_timeout))
    try:
        yield
    finally:
        if not conn.is_closed():
            await conn.execute(sql.RESET_LOCK_TIMEOUT)


def build_expire_sessions_job(
    database: Database, options: ExpireSessionsSettings, registry: CollectorRegistry
) -> ExpireSessionsJob:
    return ExpireSessionsJob(database, options, ExpireSessionsMetrics.register(registry))

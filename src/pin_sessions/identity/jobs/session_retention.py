"""SessionRetentionJob: physically delete identity rows nobody needs any more.

Two independent phases, deciding with the ``now`` fixed when the run started; a row's
age counts from its ``created_at`` (seed 000: "SICR older than 30 days, refresh_sessions
older than 90 days"):

* ``sicr`` — sign-in confirmation requests in a terminal status (Confirmed, Expired)
  created more than ``sicr_age`` (30 days) ago;
* ``refresh`` — refresh sessions Rotated, Revoked or Expired created more than
  ``refresh_age`` (90 days) ago. Every session expires 30 days after its creation, so by
  default its row, and with it the reuse detection of its token, outlives the token by
  60 days.

Active and Pending rows are never deleted: the status is in every DELETE's condition.
Deletes run in batches of at most ``batch_size`` rows, each claimed through a partial
index on ``created_at`` (migrations 0005 and 0008) with ``FOR UPDATE SKIP LOCKED`` and
committed on its own, so a statement stays short on a large table and parallel
instances take disjoint batches. The job runner (:mod:`pin_sessions.platform.jobs`)
runs the phases and the batches: a failed phase is logged and counted while the other
still runs, and ``stop`` and ``max_run_duration`` are read between batches.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter

from pin_sessions.identity import sql
from pin_sessions.platform.jobs import JobRun, KeysetCursor, PhaseOutcome
from pin_sessions.settings import SessionRetentionSettings

if TYPE_CHECKING:
    import uuid
    from datetime import datetime

    from pin_sessions.platform.database import Database

SICR_TABLE = "sign_in_confirmation_requests"
REFRESH_TABLE = "refresh_sessions"


@dataclass(frozen=True)
class RetentionPhase:
    name: str
    table: str
    delete_batch_sql: str


@dataclass(frozen=True)
class SessionRetentionMetrics:
    deleted: Counter
    errors: Counter

    @classmethod
    def register(cls, registry: CollectorRegistry) -> SessionRetentionMetrics:
        metrics = cls(
            deleted=Counter(
                "identity_session_retention_deleted_total",
                "Terminal identity rows deleted by retention, by table",
                ["table"],
                registry=registry,
            ),
            errors=Counter(
                "identity_session_retention_errors_total",
                "Failed retention phases, by table",
                ["table"],
                registry=registry,
            ),
        )
        for table in (SICR_TABLE, REFRESH_TABLE):
            metrics.deleted.labels(table=table)
            metrics.errors.labels(table=table)
        return metrics


@dataclass(kw_only=True)
class RetentionOutcome(PhaseOutcome):
    deleted: int = 0

    def counts(self) -> dict[str, int]:
        return {"deletedCount": self.deleted}


@dataclass(frozen=True)
class SessionRetentionResult:
    job_run_id: uuid.UUID
    sicr: RetentionOutcome
    refresh: RetentionOutcome
    duration_ms: int

    @property
    def succeeded(self) -> bool:
        return not (self.sicr.failed or self.refresh.failed)

    def to_json(self) -> dict[str, Any]:
        return {
            "jobRunId": str(self.job_run_id),
            "sicrDeleted": self.sicr.deleted,
            "refreshDeleted": self.refresh.deleted,
            "durationMs": self.duration_ms,
        }


@dataclass
class SessionRetentionJob:
    """Deletes terminal SICR and refresh sessions past their retention age, in batches."""

    database: Database
    options: SessionRetentionSettings
    metrics: SessionRetentionMetrics
    name: str = field(default="session-retention", init=False)
    metric_prefix: str = field(default="identity_session_retention", init=False)

    async def run_once(self, now: datetime, run: JobRun) -> SessionRetentionResult:
        phases = (
            (
                RetentionPhase("sicr", SICR_TABLE, sql.DELETE_RETIRED_SICR_BATCH),
                self.options.sicr_age,
            ),
            (
                RetentionPhase("refresh", REFRESH_TABLE, sql.DELETE_RETIRED_REFRESH_SESSIONS_BATCH),
                self.options.refresh_age,
            ),
        )
        outcomes = {}
        for phase, age in phases:
            outcome = outcomes[phase.name] = RetentionOutcome(phase=phase.name)
            work = partial(self._delete, phase, now - age, run, outcome)
            await run.phase(outcome, work, errors=self.metrics.errors.labels(table=phase.table))
        return SessionRetentionResult(
            run.id, outcomes["sicr"], outcomes["refresh"], duration_ms=run.elapsed_ms()
        )

    async def _delete(
        self, phase: RetentionPhase, cutoff: datetime, run: JobRun, outcome: RetentionOutcome
    ) -> None:
        cursor = KeysetCursor(phase.delete_batch_sql, cutoff)
        deleted = self.metrics.deleted.labels(table=phase.table)
        async with self.database.connection() as conn:

            async def batch() -> int:
                count = await cursor.next(conn, self.options.batch_size)
                outcome.deleted += count
                deleted.inc(count)
                return count

            await run.batches(self.options, batch)


def build_session_retention_job(
    database: Database, options: SessionRetentionSettings, registry: CollectorRegistry
) -> SessionRetentionJob:
    return SessionRetentionJob(database, options, SessionRetentionMetrics.register(registry))

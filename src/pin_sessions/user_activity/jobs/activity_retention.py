"""ActivityRetentionJob: delete Inactive sessions older than the retention age (seed 003).

A session is old when it was created more than ``age`` (365 days) before the ``now``
fixed at the start of the run, however late it ended (SPEC §2: "delete Inactive sessions
older than this"). Its children reference it with ``ON DELETE RESTRICT``: the job
deletes its ``action_events`` and ``property_object_views`` first, then the session, in
one transaction per batch, so a batch is all gone or all there.

Each batch claims at most ``batch_size`` sessions through ``ix_sessions_retention_created_at``
(migration 0008) with ``FOR UPDATE SKIP LOCKED``, so parallel instances take disjoint
batches and each statement stays short on a large table; the children are found through
their ``session_id`` indexes. An Active session is never touched: the status is in the
claim and in the DELETE, and an Inactive session never changes again (INV-SES-006), so it
gains no new children. The job runner (:mod:`pin_sessions.platform.jobs`) repeats the
batches, reading ``stop`` and ``max_run_duration`` between them.

A second phase deletes ``Idempotency-Key`` reservations past their 24 hours
(``user_activity.idempotency``), in batches of the same size: they answer no repeat any more,
and the table would otherwise keep one row per keyed request forever.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter

from pin_sessions.platform.jobs import PhaseOutcome, command_row_count
from pin_sessions.settings import ActivityRetentionSettings
from pin_sessions.user_activity import sql
from pin_sessions.user_activity.idempotency import KEY_LIFETIME

if TYPE_CHECKING:
    import uuid
    from datetime import datetime

    from pin_sessions.platform.database import Connection, Database
    from pin_sessions.platform.jobs import JobRun

# Children first: their foreign keys RESTRICT the session's deletion.
DELETES = (
    ("action_events", sql.DELETE_ACTION_EVENTS),
    ("property_object_views", sql.DELETE_PROPERTY_OBJECT_VIEWS),
    ("sessions", sql.DELETE_SESSIONS),
)

PHASE = "delete"
KEYS_PHASE = "delete-idempotency-keys"
KEYS_TABLE = "idempotency_keys"


@dataclass(frozen=True)
class ActivityRetentionMetrics:
    deleted: Counter
    errors: Counter

    @classmethod
    def register(cls, registry: CollectorRegistry) -> ActivityRetentionMetrics:
        metrics = cls(
            deleted=Counter(
                "user_activity_activity_retention_deleted_total",
                "Rows deleted by activity retention, by table",
                ["table"],
                registry=registry,
            ),
            errors=Counter(
                "user_activity_activity_retention_errors_total",
                "Failed retention batches",
                registry=registry,
            ),
        )
        for table in (*(table for table, _ in DELETES), KEYS_TABLE):
            metrics.deleted.labels(table=table)
        return metrics


@dataclass(kw_only=True)
class ExpiredKeysOutcome(PhaseOutcome):
    """The second phase: expired idempotency keys deleted."""

    deleted: int = 0

    def counts(self) -> dict[str, int]:
        return {"deletedCount": self.deleted}


@dataclass(kw_only=True)
class ActivityRetentionResult(PhaseOutcome):
    """One run: its sessions phase, with the keys phase alongside."""

    job_run_id: uuid.UUID
    deleted: dict[str, int] = field(default_factory=lambda: {table: 0 for table, _ in DELETES})
    keys: ExpiredKeysOutcome = field(default_factory=lambda: ExpiredKeysOutcome(phase=KEYS_PHASE))
    batches: int = 0
    largest_batch: int = 0
    duration_ms: int = 0

    @property
    def succeeded(self) -> bool:
        return not self.failed and not self.keys.failed

    def counts(self) -> dict[str, int]:
        return {"deletedCount": self.deleted["sessions"]}

    def to_json(self) -> dict[str, Any]:
        return {
            "jobRunId": str(self.job_run_id),
            "sessionsDeleted": self.deleted["sessions"],
            "actionEventsDeleted": self.deleted["action_events"],
            "propertyObjectViewsDeleted": self.deleted["property_object_views"],
            "idempotencyKeysDeleted": self.keys.deleted,
            "durationMs": self.duration_ms,
        }


@dataclass
class ActivityRetentionJob:
    """Deletes old Inactive sessions with their children, in bounded batches."""

    database: Database
    options: ActivityRetentionSettings
    metrics: ActivityRetentionMetrics
    name: str = field(default="activity-retention", init=False)
    metric_prefix: str = field(default="user_activity_activity_retention", init=False)

    async def run_once(self, now: datetime, run: JobRun) -> ActivityRetentionResult:
        cutoff = now - self.options.age
        result = ActivityRetentionResult(phase=PHASE, job_run_id=run.id)
        delete = partial(run.batches, self.options, partial(self._delete_batch, cutoff, result))
        await run.phase(result, delete, errors=self.metrics.errors)
        expire = partial(
            run.batches, self.options, partial(self._delete_keys, now - KEY_LIFETIME, result.keys)
        )
        await run.phase(result.keys, expire, errors=self.metrics.errors)
        result.duration_ms = run.elapsed_ms()
        return result

    async def _delete_batch(self, cutoff: datetime, result: ActivityRetentionResult) -> int:
        """One transaction: claim a batch of sessions, delete children then sessions."""
        async with self.database.transaction() as conn:
            rows = await conn.fetch(sql.CLAIM_RETIRED_SESSIONS, cutoff, self.options.batch_size)
            counts = await _delete_claimed(conn, [row["id"] for row in rows])
        result.batches += 1
        result.largest_batch = max(result.largest_batch, counts["sessions"])
        for table, count in counts.items():
            result.deleted[table] += count
            self.metrics.deleted.labels(table=table).inc(count)
        return len(rows)

    async def _delete_keys(self, cutoff: datetime, outcome: ExpiredKeysOutcome) -> int:
        async with self.database.connection() as conn:
            status = await conn.execute(
                sql.DELETE_EXPIRED_IDEMPOTENCY_KEYS, cutoff, self.options.batch_size
            )
        deleted = command_row_count(status)
        outcome.deleted += deleted
        self.metrics.deleted.labels(table=KEYS_TABLE).inc(deleted)
        return deleted


async def _delete_claimed(conn: Connection, session_ids: list[uuid.UUID]) -> dict[str, int]:
    if not session_ids:
        return {table: 0 for table, _ in DELETES}
    return {
        table: command_row_count(await conn.execute(statement, session_ids))
        for table, statement in DELETES
    }


def build_activity_retention_job(
    database: Database, options: ActivityRetentionSettings, registry: CollectorRegistry
) -> ActivityRetentionJob:
    return ActivityRetentionJob(database, options, ActivityRetentionMetrics.register(registry))

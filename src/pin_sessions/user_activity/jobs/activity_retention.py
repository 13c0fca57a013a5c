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

A second phase deletes ``Idempotency-Key`` reservations past their 24 hours, in batches of
the same size: the actions' and views' (``user_activity.idempotency``) and the AnonymousIds
issued to keyed starts (``user_activity.sessions``). They answer no repeat any more, and the
tables would otherwise keep one row per keyed request forever.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from pin_sessions.platform.job_spec import Count, JobSpec, Phase, counter, errors
from pin_sessions.settings import ActivityRetentionSettings
from pin_sessions.user_activity import repository
from pin_sessions.user_activity.idempotency import KEY_LIFETIME

if TYPE_CHECKING:
    from datetime import datetime

    from pin_sessions.platform.database import Database
    from pin_sessions.platform.jobs import JobRun, PhaseRun

PHASE = "delete"
KEYS_PHASE = "delete-idempotency-keys"
KEYS_TABLE = "idempotency_keys"
DELETED = "deleted_total"

SPEC = JobSpec(
    name="activity-retention",
    metric_prefix="user_activity_activity_retention",
    metrics=(
        counter(
            DELETED,
            "Rows deleted by activity retention, by table",
            labels=("table",),
            series=(*((table,) for table, _ in repository.RETIRED_ROWS), (KEYS_TABLE,)),
        ),
        errors("Failed retention batches"),
    ),
    phases=(
        Phase(
            PHASE,
            counts=(
                Count(
                    "sessions",
                    "sessionsDeleted",
                    log="deletedCount",
                    counter=DELETED,
                    labels=("sessions",),
                ),
                Count(
                    "action_events",
                    "actionEventsDeleted",
                    counter=DELETED,
                    labels=("action_events",),
                ),
                Count(
                    "property_object_views",
                    "propertyObjectViewsDeleted",
                    counter=DELETED,
                    labels=("property_object_views",),
                ),
            ),
        ),
        Phase(
            KEYS_PHASE,
            counts=(
                Count(
                    "deleted",
                    "idempotencyKeysDeleted",
                    log="deletedCount",
                    counter=DELETED,
                    labels=(KEYS_TABLE,),
                ),
            ),
        ),
    ),
)


@dataclass
class ActivityRetentionJob:
    """Deletes old Inactive sessions with their children, in bounded batches."""

    database: Database
    options: ActivityRetentionSettings
    spec: ClassVar[JobSpec] = SPEC

    async def run_once(self, now: datetime, run: JobRun) -> None:
        cutoff = now - self.options.age
        keys_cutoff = now - KEY_LIFETIME

        async def delete(phase: PhaseRun) -> None:
            await phase.batches(self.options, lambda: self._delete_batch(cutoff, phase))

        async def expire(phase: PhaseRun) -> None:
            await phase.batches(self.options, lambda: self._delete_keys(keys_cutoff, phase))

        await run.phase(PHASE, delete)
        await run.phase(KEYS_PHASE, expire)

    async def _delete_batch(self, cutoff: datetime, phase: PhaseRun) -> int:
        """One transaction: claim a batch of sessions, delete children then sessions."""
        async with self.database.transaction() as conn:
            claimed = await repository.claim_retired_sessions(conn, cutoff, self.options.batch_size)
            counts = await repository.delete_retired(conn, claimed)
        for table, count in counts.items():
            phase.add(table, count)
        return len(claimed)

    async def _delete_keys(self, cutoff: datetime, phase: PhaseRun) -> int:
        async with self.database.connection() as conn:
            deleted = await repository.delete_expired_idempotency_keys(
                conn, cutoff, self.options.batch_size
            )
        phase.add("deleted", deleted)
        return deleted


def build_activity_retention_job(
    database: Database, options: ActivityRetentionSettings
) -> ActivityRetentionJob:
    return ActivityRetentionJob(database, options)

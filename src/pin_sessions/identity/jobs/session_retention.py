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

from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, ClassVar

from pin_sessions.identity import repository
from pin_sessions.platform.job_spec import Count, JobSpec, Phase, counter, errors
from pin_sessions.platform.jobs import JobRun, PhaseRun
from pin_sessions.settings import SessionRetentionSettings

if TYPE_CHECKING:
    from datetime import datetime

    from pin_sessions.platform.database import Database
    from pin_sessions.platform.queries import Query

SICR_TABLE = "sign_in_confirmation_requests"
REFRESH_TABLE = "refresh_sessions"
TABLES = ((SICR_TABLE,), (REFRESH_TABLE,))

SPEC = JobSpec(
    name="session-retention",
    metric_prefix="identity_session_retention",
    metrics=(
        counter(
            "deleted_total",
            "Terminal identity rows deleted by retention, by table",
            labels=("table",),
            series=TABLES,
        ),
        errors("Failed retention phases, by table", labels=("table",), series=TABLES),
    ),
    phases=(
        Phase(
            "sicr",
            counts=(
                Count(
                    "deleted",
                    "sicrDeleted",
                    log="deletedCount",
                    counter="deleted_total",
                    labels=(SICR_TABLE,),
                ),
            ),
            error_labels=(SICR_TABLE,),
        ),
        Phase(
            "refresh",
            counts=(
                Count(
                    "deleted",
                    "refreshDeleted",
                    log="deletedCount",
                    counter="deleted_total",
                    labels=(REFRESH_TABLE,),
                ),
            ),
            error_labels=(REFRESH_TABLE,),
        ),
    ),
)


@dataclass
class SessionRetentionJob:
    """Deletes terminal SICR and refresh sessions past their retention age, in batches."""

    database: Database
    options: SessionRetentionSettings
    spec: ClassVar[JobSpec] = SPEC

    async def run_once(self, now: datetime, run: JobRun) -> None:
        phases = (
            ("sicr", repository.RETIRED_SICR, self.options.sicr_age),
            ("refresh", repository.RETIRED_REFRESH_SESSIONS, self.options.refresh_age),
        )
        for name, query, age in phases:
            await run.phase(name, partial(self._delete, query, now - age))

    async def _delete(self, query: Query, cutoff: datetime, phase: PhaseRun) -> None:
        cursor = repository.retention_batches(query, cutoff)
        async with self.database.connection() as conn:

            async def batch() -> int:
                count = await cursor.next(conn, self.options.batch_size)
                phase.add("deleted", count)
                return count

            await phase.batches(self.options, batch)


def build_session_retention_job(
    database: Database, options: SessionRetentionSettings
) -> SessionRetentionJob:
    return SessionRetentionJob(database, options)

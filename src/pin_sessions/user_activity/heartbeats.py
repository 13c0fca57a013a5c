"""Heartbeats, group-committed: one UPDATE for every device heard during the last round trip.

Every device heartbeats once a minute, so the heartbeat is most of the API's writes, and
one conditional UPDATE per heartbeat is bounded by PostgreSQL's cost per statement and per
commit. ``Heartbeats`` sends the UPDATE of whoever arrived while the previous one was in
flight as one statement (``sql.HEARTBEAT_BATCH``, through ``platform.group_commit``):
each request still gets its own row, or None when its device has no Active session — the
caller then starts one (INV-SES-003). Two heartbeats of one device in one batch are one
row, extended to the later of their times, and get the same answer.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime

import asyncpg
from opentelemetry.instrumentation.utils import suppress_instrumentation
from prometheus_client import CollectorRegistry, Histogram

from pin_sessions.platform.database import Database
from pin_sessions.platform.errors import ServiceUnavailable
from pin_sessions.platform.group_commit import GroupCommit
from pin_sessions.user_activity import repository
from pin_sessions.user_activity.domain import ExtendedSession

# The devices of a batch are sorted, so batches of several API processes lock rows in one
# order; should PostgreSQL still pick a plan that does not, a deadlock aborts one batch
# (no row of it changed), which simply runs again.
DEADLOCK_RETRIES = 3
BATCH_SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


class Heartbeats:
    """The process's heartbeat writer: ``extend`` is one device's share of a batch."""

    def __init__(self, database: Database, registry: CollectorRegistry) -> None:
        self._database = database
        batch_sizes = Histogram(
            "user_activity_heartbeat_batch_size",
            "Devices extended by one group-committed heartbeat UPDATE",
            buckets=BATCH_SIZE_BUCKETS,
            registry=registry,
        )
        self._group: GroupCommit[uuid.UUID, datetime, ExtendedSession] = GroupCommit(
            self._extend_all, merge=max, batch_sizes=batch_sizes
        )

    async def extend(self, anonymous_id: uuid.UUID, now: datetime) -> ExtendedSession | None:
        """The device's Active session once extended to ``now``; None when it has none."""
        # Bounded as a call of its own: not a stuck batch's wait and then its own (SPEC §11).
        async with self._database.call_bound():
            return await self._group.submit(anonymous_id, now)

    async def _extend_all(
        self, activity: Mapping[uuid.UUID, datetime]
    ) -> dict[uuid.UUID, ExtendedSession]:
        for _ in range(DEADLOCK_RETRIES):
            try:
                # A batch belongs to no request's trace, so the sampler would drop its
                # statement's span (platform.tracing): it is not made at all, a cost that
                # counts when batches are small.
                with suppress_instrumentation():
                    async with self._database.connection() as conn:
                        return await repository.extend_sessions(conn, activity)
            except asyncpg.DeadlockDetectedError:
                continue
        raise ServiceUnavailable("heartbeats kept deadlocking with another process; retry")

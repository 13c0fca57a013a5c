"""Heartbeats, group-committed: one UPDATE for every device heard during the last round trip.

Every device heartbeats once a minute, so the heartbeat is most of the API's writes, and
one conditional UPDATE per heartbeat is bounded by PostgreSQL's cost per statement and per
commit. ``Heartbeats`` sends the UPDATE of whoever arrived while the previous one was in
flight as one statement (``heartbeat_batch``, through ``platform.group_commit``):
each request still gets its own row, or None when its device has no Active session — the
caller then starts one (INV-SES-003). Two heartbeats of one device in one batch are one
row, extended to the later of their times, and get the same answer.

The batch never waits on a row lock (SPEC §11): it claims the rows it extends with ``SKIP
LOCKED`` and names the devices whose Active row another transaction holds (a closer batch,
a link, the sign-ins consumer, an erasure). Each of those is extended on its own by
``heartbeat_one``, bounded by the statement timeout, while the rest of the batch is
answered at once; if the row turns out closed when the lock goes, the device has no Active
session and its caller starts one as usual. At most ``alone_limit`` such statements run
at a time, so a burst of locked rows cannot take the pool from every other request.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping
from datetime import datetime, timedelta

import asyncpg
from opentelemetry.instrumentation.utils import suppress_instrumentation
from prometheus_client import CollectorRegistry, Counter, Histogram

from pin_sessions.platform.database import Database
from pin_sessions.platform.errors import ServiceUnavailable
from pin_sessions.platform.group_commit import Flushed, GroupCommit
from pin_sessions.user_activity import repository
from pin_sessions.user_activity.domain import ExtendedSession

# The batch skips locked rows, so it never waits for a row lock; should it still be part of a
# deadlock (an index entry's uniqueness check waits for its inserter), PostgreSQL aborts it
# (no row of it changed), and it simply runs again.
DEADLOCK_RETRIES = 3
BATCH_SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


class Heartbeats:
    """The process's heartbeat writer: ``extend`` is one device's share of a batch."""

    def __init__(
        self,
        database: Database,
        registry: CollectorRegistry,
        *,
        alone_limit: int,
        alone_wait: timedelta,
        linger: timedelta,
    ) -> None:
        self._database = database
        # A locked device waits for a turn as a request waits for a pool connection.
        self._alone_slots = asyncio.Semaphore(alone_limit)
        self._alone_wait = alone_wait.total_seconds()
        batch_sizes = Histogram(
            "user_activity_heartbeat_batch_size",
            "Devices extended by one group-committed heartbeat UPDATE",
            buckets=BATCH_SIZE_BUCKETS,
            registry=registry,
        )
        self._locked = Counter(
            "user_activity_heartbeat_row_locked",
            "Heartbeats whose session row another transaction held, extended on their own",
            registry=registry,
        )
        self._group: GroupCommit[uuid.UUID, datetime, ExtendedSession] = GroupCommit(
            self._extend_all,
            alone=self._extend_one,
            merge=max,
            batch_sizes=batch_sizes,
            linger=linger.total_seconds(),
        )

    @property
    def waiting(self) -> int:
        """Devices waiting for the next batch."""
        return self._group.waiting

    async def extend(self, anonymous_id: uuid.UUID, now: datetime) -> ExtendedSession | None:
        """The device's Active session once extended to ``now``; None when it has none."""
        # Bounded as a call of its own: not a stuck batch's wait and then its own (SPEC §11).
        async with self._database.call_bound():
            return await self._group.submit(anonymous_id, now)

    async def _extend_all(
        self, activity: Mapping[uuid.UUID, datetime]
    ) -> Flushed[uuid.UUID, ExtendedSession]:
        for _ in range(DEADLOCK_RETRIES):
            try:
                # A batch belongs to no request's trace, so the sampler would drop its
                # statement's span (platform.tracing): it is not made at all, a cost that
                # counts when batches are small.
                with suppress_instrumentation():
                    async with self._database.connection() as conn:
                        extended, locked = await repository.extend_sessions(conn, activity)
            except asyncpg.DeadlockDetectedError:
                continue
            self._locked.inc(len(locked))
            return Flushed(extended, alone=locked)
        raise ServiceUnavailable("heartbeats kept deadlocking with another process; retry")

    async def _extend_one(self, anonymous_id: uuid.UUID, now: datetime) -> ExtendedSession | None:
        """A device whose row was locked: its own UPDATE waits for the lock, and only it."""
        try:
            async with asyncio.timeout(self._alone_wait):
                await self._alone_slots.acquire()
        except TimeoutError as exc:
            raise ServiceUnavailable("the database did not answer in time") from exc
        try:
            with suppress_instrumentation():
                async with self._database.connection() as conn:
                    return await repository.extend_session(conn, anonymous_id, now)
        finally:
            self._alone_slots.release()

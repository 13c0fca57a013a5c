"""The statements of identity's jobs: ExpireSessionsJob's phases, SessionRetentionJob's
batches, and the lock timeout a job's connection runs under."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime

from pin_sessions.identity.repository.loaded import QUERIES
from pin_sessions.platform.batching import KeysetCursor
from pin_sessions.platform.database import Connection
from pin_sessions.platform.queries import Query


@dataclass(frozen=True)
class Expiry:
    """One ExpireSessionsJob phase's statements, all guarded by the status they flip."""

    count: Query
    oldest: Query
    expire_all: Query
    expire_chunk: Query


REFRESH_EXPIRY = Expiry(
    QUERIES.count_expired_refresh_sessions,
    QUERIES.oldest_expired_refresh_session,
    QUERIES.expire_refresh_sessions,
    QUERIES.expire_refresh_sessions_chunk,
)
SICR_EXPIRY = Expiry(
    QUERIES.count_expired_sicr,
    QUERIES.oldest_expired_sicr,
    QUERIES.expire_sicr,
    QUERIES.expire_sicr_chunk,
)

# SessionRetentionJob: each table's batch, a KeysetCursor's query.
RETIRED_SICR = QUERIES.delete_retired_sicr_batch
RETIRED_REFRESH_SESSIONS = QUERIES.delete_retired_refresh_sessions_batch


async def count_expired(conn: Connection, expiry: Expiry, now: datetime) -> int:
    """Rows under the phase's guard with ``expires_at <= now``: its backlog."""
    count: int = await expiry.count.fetchval(conn, now=now)
    return count


async def oldest_expired(conn: Connection, expiry: Expiry, now: datetime) -> datetime | None:
    """The earliest ``expires_at`` still under the guard and past ``now``; None: none is."""
    first: datetime | None = await expiry.oldest.fetchval(conn, now=now)
    return first


async def expire_all(conn: Connection, expiry: Expiry, now: datetime) -> Sequence[datetime]:
    """One flip of every row past ``now``: their ``expires_at``."""
    expired: Sequence[datetime] | None = await expiry.expire_all.fetchval(conn, now=now)
    return expired or ()


def expiry_chunks(expiry: Expiry, now: datetime) -> KeysetCursor:
    """Chunks of the phase's flip, each claiming rows from where the previous one ended."""
    return KeysetCursor(expiry.expire_chunk, now)


def retention_batches(query: Query, cutoff: datetime) -> KeysetCursor:
    """Batches of ``query`` (``RETIRED_SICR`` or ``RETIRED_REFRESH_SESSIONS``) before ``cutoff``."""
    return KeysetCursor(query, cutoff)


@asynccontextmanager
async def lock_timeout(conn: Connection, setting: str) -> AsyncIterator[None]:
    """``setting`` (a ``lock_timeout`` value) on the connection, reset before it goes back.

    A pool need not reset its connections (the API's does not): whoever changes a session
    setting puts it back.
    """
    await QUERIES.set_lock_timeout.execute(conn, lock_timeout=setting)
    try:
        yield
    finally:
        if not conn.is_closed():
            await QUERIES.reset_lock_timeout.execute(conn)

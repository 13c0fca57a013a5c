"""dev-stats' one door to the database: every statement of ``queries.sql`` runs through here.

Each function runs on the caller's connection, inside the caller's transaction when there
is one; none commits.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import date, datetime
from typing import TYPE_CHECKING

from pin_sessions.platform.batching import rows_affected
from pin_sessions.platform.erasure import Tombstones
from pin_sessions.platform.queries import load_queries

if TYPE_CHECKING:
    import asyncpg

    from pin_sessions.dev_stats.domain import SessionFact
    from pin_sessions.platform.database import Connection

QUERIES = load_queries(__package__)

# Erased users (platform.erasure): the first key of this context's per-user advisory locks.
USER_LOCK_CLASS = 0x4453  # "DS"
TOMBSTONES = Tombstones(
    lock_class=USER_LOCK_CLASS,
    select_erased=QUERIES.select_erased,
    insert_erased=QUERIES.insert_erased,
)


async def record_fact(
    conn: Connection, fact: SessionFact, *, duration_bucket: int, now: datetime
) -> bool:
    """The fact and its day's rollup; False when the session was already recorded."""
    status = await QUERIES.record_fact.execute(
        conn,
        session_id=fact.session_id,
        message_id=fact.message_id,
        anonymous_id=fact.anonymous_id,
        user_id=fact.user_id,
        created_at=fact.created_at,
        last_activity_at=fact.last_activity_at,
        duration_seconds=fact.duration_seconds,
        recorded_at=now,
        duration_bucket=duration_bucket,
    )
    return status == "INSERT 0 1"


async def clear_fact_user(conn: Connection, session_id: uuid.UUID) -> None:
    await QUERIES.clear_fact_user.execute(conn, session_id=session_id)


async def days(conn: Connection, first: date, last: date) -> Sequence[asyncpg.Record]:
    """One row per day of ``first`` … ``last``, both included, a day without sessions too."""
    return await QUERIES.select_days.fetch(conn, first_day=first, last_day=last)


async def clear_erased_user_facts(conn: Connection, user_id: uuid.UUID, batch_size: int) -> int:
    """One batch: at most ``batch_size`` of the user's facts lose their id; how many did."""
    status = await QUERIES.clear_erased_user_facts.execute(
        conn, user_id=user_id, batch_size=batch_size
    )
    return rows_affected(status)

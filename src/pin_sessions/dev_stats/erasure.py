"""An erased user in dev-stats (SPEC §10): their facts stay, counted, without their id.

``erase_user`` writes the tombstone under the user's exclusive lock (``platform.erasure``),
then clears the id from the user's facts in bounded batches. A session-ended event of the
user that arrives later — published by the activity closer just before the erasure, or
delivered out of order on Kafka — is recorded and counted like any other, and its id
cleared in the same transaction (``operations.record_session_ended`` asks ``is_erased``).
"""

from __future__ import annotations

import uuid
from datetime import datetime

from pin_sessions.dev_stats import sql
from pin_sessions.platform.database import Connection, Database
from pin_sessions.platform.erasure import LOCK_USER_EXCLUSIVE, LOCK_USER_SHARED, user_digest

ERASURE_BATCH_ROWS = 1000


async def erase_user(
    database: Database, user_id: uuid.UUID, now: datetime, *, batch_rows: int = ERASURE_BATCH_ROWS
) -> int:
    """Tombstone, then clear the id from every fact; returns the facts changed. Repeatable."""
    async with database.transaction() as conn:
        await conn.execute(LOCK_USER_EXCLUSIVE, sql.USER_LOCK_CLASS, str(user_id))
        await conn.execute(sql.INSERT_ERASED_USER, user_digest(user_id), now)
    cleared = 0
    while True:
        async with database.transaction() as conn:
            status = await conn.execute(sql.CLEAR_ERASED_USER_FACTS, user_id, batch_rows)
        count = int(status.rsplit(" ", 1)[1])
        cleared += count
        if count < batch_rows:
            return cleared


async def is_erased(conn: Connection, user_id: uuid.UUID) -> bool:
    """Whether the user is erased, holding the user's shared lock until the transaction ends."""
    await conn.execute(LOCK_USER_SHARED, sql.USER_LOCK_CLASS, str(user_id))
    erased: bool = await conn.fetchval(sql.SELECT_USER_ERASED, user_digest(user_id))
    return erased

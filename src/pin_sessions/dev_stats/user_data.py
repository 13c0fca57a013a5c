"""An erased user in dev-stats (SPEC §10): their facts stay, counted, without their id.

``erase_user`` writes the tombstone under the user's exclusive lock (``platform.erasure``),
then clears the id from the user's facts in bounded batches, each its own transaction
(``platform.batching``). A session-ended event of the user that arrives later — published
by the activity closer just before the erasure, or delivered out of order on Kafka — is
recorded and counted like any other, and its id cleared in the same transaction
(``recording.record_session_ended`` asks ``is_erased``).
"""

from __future__ import annotations

import uuid
from datetime import datetime
from functools import partial

from pin_sessions.dev_stats import repository
from pin_sessions.platform.batching import in_transaction, until_short
from pin_sessions.platform.database import Connection, Database


async def erase_user(
    database: Database, user_id: uuid.UUID, now: datetime, *, batch_size: int
) -> int:
    """Tombstone, then clear the id from every fact; returns the facts changed. Repeatable."""
    async with database.transaction() as conn:
        await repository.TOMBSTONES.bury(conn, user_id, now)
    clear = partial(repository.clear_erased_user_facts, user_id=user_id, batch_size=batch_size)
    progress = await until_short(in_transaction(database, clear), size=batch_size)
    return progress.rows


async def is_erased(conn: Connection, user_id: uuid.UUID) -> bool:
    """Whether the user is erased, holding the user's shared lock until the transaction ends."""
    return await repository.TOMBSTONES.is_erased(conn, user_id)

"""The identity side of Bearer authentication: is the token's refresh session still live?"""

from __future__ import annotations

import uuid
from datetime import datetime

from pin_sessions.platform.database import Database

# Lazy TTL check (seed 000): an Active row past expires_at is not live, whether or not
# ExpireSessionsJob has flipped it yet.
SELECT_SESSION_IS_LIVE = """
select exists (
    select 1
    from identity.refresh_sessions
    where id = $1 and user_id = $2 and status = 'Active' and expires_at > $3
)
"""


class RefreshSessionLiveness:
    """Implements :class:`pin_sessions.platform.auth.SessionLiveness` on identity's table."""

    def __init__(self, database: Database) -> None:
        self._database = database

    async def is_active(self, session_id: uuid.UUID, user_id: uuid.UUID, now: datetime) -> bool:
        async with self._database.connection() as conn:
            live: bool = await conn.fetchval(SELECT_SESSION_IS_LIVE, session_id, user_id, now)
            return live

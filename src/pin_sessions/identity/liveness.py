"""The identity side of Bearer authentication: is the token's refresh session still live?"""

from __future__ import annotations

import uuid
from datetime import datetime

from pin_sessions.identity import repository
from pin_sessions.platform.database import Database


class RefreshSessionLiveness:
    """Implements :class:`pin_sessions.platform.auth.SessionLiveness` on identity's table."""

    def __init__(self, database: Database) -> None:
        self._database = database

    async def is_active(self, session_id: uuid.UUID, user_id: uuid.UUID, now: datetime) -> bool:
        async with self._database.connection() as conn:
            return await repository.session_is_live(conn, session_id, user_id, now)

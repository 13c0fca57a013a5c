"""The read side: history pages with their children, a device's link, sessions open now."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from pin_sessions.user_activity.repository.loaded import QUERIES

if TYPE_CHECKING:
    import asyncpg

    from pin_sessions.platform.database import Connection

# A history page's position: the (created_at, id) of the last session seen, or the start.
After = tuple[datetime, uuid.UUID] | None


async def device_history(
    conn: Connection, anonymous_id: uuid.UUID, after: After, page_rows: int
) -> list[asyncpg.Record]:
    """The device's unlinked sessions after ``after``, newest first, at most ``page_rows``."""
    after_created_at, after_id = after or (None, None)
    return await QUERIES.select_device_history.fetch(
        conn,
        anonymous_id=anonymous_id,
        after_created_at=after_created_at,
        after_id=after_id,
        page_rows=page_rows,
    )


async def user_history(
    conn: Connection, user_id: uuid.UUID, after: After, page_rows: int
) -> list[asyncpg.Record]:
    """The user's sessions after ``after``, newest first, at most ``page_rows``."""
    after_created_at, after_id = after or (None, None)
    return await QUERIES.select_user_history.fetch(
        conn,
        user_id=user_id,
        after_created_at=after_created_at,
        after_id=after_id,
        page_rows=page_rows,
    )


async def history_actions(
    conn: Connection, session_ids: Sequence[uuid.UUID], per_session: int
) -> list[asyncpg.Record]:
    """The latest ``per_session`` actions of each session, by session, oldest first."""
    return await QUERIES.select_history_actions.fetch(
        conn, session_ids=list(session_ids), per_session=per_session
    )


async def history_views(
    conn: Connection, session_ids: Sequence[uuid.UUID], per_session: int
) -> list[asyncpg.Record]:
    """The latest ``per_session`` views of each session, by session, oldest first."""
    return await QUERIES.select_history_views.fetch(
        conn, session_ids=list(session_ids), per_session=per_session
    )


async def device_link(conn: Connection, anonymous_id: uuid.UUID) -> asyncpg.Record | None:
    """The device's latest session's link (``anonymous_id``, ``user_id``, ``linked_at``)."""
    return await QUERIES.select_device_link.fetchrow(conn, anonymous_id=anonymous_id)


async def count_open_sessions(conn: Connection) -> int:
    """Active sessions of people (not bots)."""
    count: int = await QUERIES.count_open_sessions.fetchval(conn)
    return count

"""A user's data (SPEC §10): the tombstones, the erasure's batches, the export's pages."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from pin_sessions.platform.batching import rows_affected
from pin_sessions.platform.erasure import Tombstones
from pin_sessions.platform.streamed_json import keyset_rows
from pin_sessions.user_activity.repository.loaded import QUERIES

if TYPE_CHECKING:
    import asyncpg

    from pin_sessions.platform.database import Connection, Database
    from pin_sessions.platform.queries import Query

# Erased users (platform.erasure): the first key of this context's per-user advisory locks.
USER_LOCK_CLASS = 0x5541  # "UA"
TOMBSTONES = Tombstones(
    lock_class=USER_LOCK_CLASS,
    select_erased=QUERIES.select_erased,
    insert_erased=QUERIES.insert_erased,
)
# An erased user's rows, in the order they can go: children first (they reference their
# session ON DELETE RESTRICT).
ERASURE_DELETES = (
    QUERIES.delete_erased_user_actions,
    QUERIES.delete_erased_user_views,
    QUERIES.delete_erased_user_sessions,
)


async def delete_erased_user_active_sessions(conn: Connection, user_id: uuid.UUID) -> int:
    """The erased user's Active sessions and their children, deleted without a close; the
    caller's transaction holds them from the first statement. How many rows went."""
    rows = await QUERIES.lock_erased_user_active_sessions.fetch(conn, user_id=user_id)
    session_ids = [row["id"] for row in rows]
    if not session_ids:
        return 0
    deletes = (
        QUERIES.delete_active_session_actions,
        QUERIES.delete_active_session_views,
        QUERIES.delete_active_sessions,
    )
    return sum(
        [rows_affected(await delete.execute(conn, session_ids=session_ids)) for delete in deletes]
    )


async def delete_erased_user_rows(
    conn: Connection, delete: Query, user_id: uuid.UUID, batch_size: int
) -> int:
    """One batch of ``delete`` (one of ``ERASURE_DELETES``): how many rows went."""
    return rows_affected(await delete.execute(conn, user_id=user_id, batch_size=batch_size))


def _paged(query: Query, key: str) -> str:
    """``query``'s text for keyset_rows, once its parameters are checked to end as it fills
    them: the key to read after (``after_<key>``, ``after_id``), then the page size."""
    expected = (f"after_{key}", "after_id", "page_rows")
    if query.params[-3:] != expected:
        raise ValueError(f"{query.name} must end with the parameters {expected}")
    return query.text


_SESSIONS_PAGE = _paged(QUERIES.export_sessions_page, "created_at")
_VIEWS_PAGE = _paged(QUERIES.export_views_page, "started_at")
_ACTIONS_PAGE = _paged(QUERIES.export_actions_page, "created_at")


def sessions_of(database: Database, user_id: uuid.UUID) -> AsyncIterator[asyncpg.Record]:
    """The user's sessions, oldest first, a page at a time (each its connection)."""
    return keyset_rows(database, _SESSIONS_PAGE, user_id)


def views_of(database: Database, session_id: uuid.UUID) -> AsyncIterator[asyncpg.Record]:
    """The session's views, by (started_at, id), a page at a time."""
    return keyset_rows(database, _VIEWS_PAGE, session_id, key=("started_at", "id"))


def actions_of(database: Database, session_id: uuid.UUID) -> AsyncIterator[asyncpg.Record]:
    """The session's actions, by (created_at, id), a page at a time."""
    return keyset_rows(database, _ACTIONS_PAGE, session_id)

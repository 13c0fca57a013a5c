"""The jobs' statements: ActivityCloserJob's claim and backlog, ActivityRetentionJob's deletes."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import TYPE_CHECKING

from pin_sessions.platform.batching import rows_affected
from pin_sessions.user_activity.repository.loaded import QUERIES

if TYPE_CHECKING:
    from pin_sessions.platform.database import Connection

# A retired session's rows, by table, in the order they can go: children first (their
# foreign keys RESTRICT the session's deletion).
RETIRED_ROWS = (
    ("action_events", QUERIES.delete_retired_actions),
    ("property_object_views", QUERIES.delete_retired_views),
    ("sessions", QUERIES.delete_retired_sessions),
)


async def claim_idle_sessions(
    conn: Connection, idle_before: datetime, batch_size: int
) -> list[uuid.UUID]:
    """At most ``batch_size`` Active sessions idle before ``idle_before``, oldest activity
    first, locked until the transaction ends; those another transaction holds are skipped."""
    rows = await QUERIES.claim_idle_sessions.fetch(
        conn, idle_before=idle_before, batch_size=batch_size
    )
    return [row["id"] for row in rows]


async def count_idle_sessions(conn: Connection, idle_before: datetime) -> int:
    """Active sessions idle before ``idle_before``: the closer's backlog."""
    count: int = await QUERIES.count_idle_sessions.fetchval(conn, idle_before=idle_before)
    return count


async def claim_retired_sessions(
    conn: Connection, created_before: datetime, batch_size: int
) -> list[uuid.UUID]:
    """At most ``batch_size`` Inactive sessions created before ``created_before``, oldest
    first, locked until the transaction ends; those another transaction holds are skipped."""
    rows = await QUERIES.claim_retired_sessions.fetch(
        conn, created_before=created_before, batch_size=batch_size
    )
    return [row["id"] for row in rows]


async def delete_retired(conn: Connection, session_ids: list[uuid.UUID]) -> dict[str, int]:
    """The claimed sessions with their actions and views: rows deleted, by table."""
    if not session_ids:
        return {table: 0 for table, _ in RETIRED_ROWS}
    return {
        table: rows_affected(await delete.execute(conn, session_ids=session_ids))
        for table, delete in RETIRED_ROWS
    }


async def delete_expired_idempotency_keys(
    conn: Connection, expired_before: datetime, batch_size: int
) -> int:
    """At most ``batch_size`` keys of each kind created before ``expired_before``: how many
    went."""
    deleted: int = await QUERIES.delete_expired_idempotency_keys.fetchval(
        conn, expired_before=expired_before, batch_size=batch_size
    )
    return deleted

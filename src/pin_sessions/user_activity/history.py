"""The read side: session history pages, a device's link, the sessions open now.

History pages go newest first, with opaque cursors. A page lists sessions with their
latest actions and views. The user's history "before and after sign-in" is assembled here
through session ownership: children keep the ``user_id`` snapshot they were written with
(seed 003). Each read is autocommit statements on one connection: nothing is written.

Pages tolerate lag (SPEC §11): they are read through :class:`Reads`, on the read replica
when there is one within ``PIN_DATABASE__READ_MAX_LAG`` of the primary. The device's link
is not: linking reads it to decide, so it comes from the primary.
"""

from __future__ import annotations

import base64
import binascii
import uuid
from collections import defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from pin_sessions.platform.database import Connection, Database
from pin_sessions.platform.reads import Reads
from pin_sessions.user_activity import repository
from pin_sessions.user_activity.domain import open_or_duration_seconds
from pin_sessions.user_activity.errors import CursorInvalid, DeviceNotFound, LimitInvalid

DEFAULT_PAGE_SIZE = 20
MAX_PAGE_SIZE = 100
# Children shown per session in a page; the page stays bounded whatever a session holds.
CHILDREN_PER_SESSION = 50
# SPEC §9: a time that reaches SQL lies in 2000-01-01 … now + 1 day. A cursor is ours, but
# it travels through the client: one near datetime.min or .max would overflow the driver.
EARLIEST_CURSOR = datetime(2000, 1, 1, tzinfo=UTC)
CURSOR_AHEAD = timedelta(days=1)


def page_size(text: str | None) -> int:
    """``limit`` of a history query: a whole number from 1 to MAX_PAGE_SIZE, else a 400."""
    if text is None:
        return DEFAULT_PAGE_SIZE
    if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= MAX_PAGE_SIZE:
        raise LimitInvalid(f"limit must be a whole number from 1 to {MAX_PAGE_SIZE}")
    return int(text)


@dataclass(frozen=True)
class Cursor:
    """Position after the last item of a page: its ``(created_at, id)``."""

    created_at: datetime
    session_id: uuid.UUID

    def encode(self) -> str:
        text = f"{self.created_at.isoformat()}|{self.session_id}"
        return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")

    @classmethod
    def decode(cls, token: str, *, now: datetime) -> Cursor:
        """A cursor this service issued; anything else, or a time out of range, is a 400."""
        try:
            padded = token + "=" * (-len(token) % 4)
            created_at, session_id = base64.urlsafe_b64decode(padded).decode().split("|")
            cursor = cls(datetime.fromisoformat(created_at), uuid.UUID(session_id))
        except (ValueError, binascii.Error, UnicodeDecodeError) as exc:
            raise CursorInvalid() from exc
        if cursor.created_at.tzinfo is None or not (
            # Compared as UTC offsets from the bounds, never converted: that could overflow.
            cursor.created_at - EARLIEST_CURSOR >= timedelta(0)
            and now + CURSOR_AHEAD - cursor.created_at >= timedelta(0)
        ):
            raise CursorInvalid()
        return cursor


@dataclass(frozen=True)
class HistoryPage:
    items: list[dict[str, Any]]
    next_cursor: str | None


async def device_history(
    reads: Reads, anonymous_id: uuid.UUID, *, limit: int, cursor: str | None, now: datetime
) -> HistoryPage:
    """A guest's own device: only its sessions no user has been linked to."""
    return await _page(reads, repository.device_history, anonymous_id, limit, cursor, now)


async def user_history(
    reads: Reads, user_id: uuid.UUID, *, limit: int, cursor: str | None, now: datetime
) -> HistoryPage:
    """Every session linked to ``user_id``, with what happened before the sign-in too."""
    return await _page(reads, repository.user_history, user_id, limit, cursor, now)


async def device_link(db: Database, anonymous_id: uuid.UUID) -> dict[str, Any]:
    """The device's current link (its latest session); 404 for a device never seen."""
    async with db.connection() as conn:
        row = await repository.device_link(conn, anonymous_id)
    if row is None:
        raise DeviceNotFound()
    return {
        "anonymousId": row["anonymous_id"],
        "userId": row["user_id"],
        "linkedAt": row["linked_at"],
    }


async def count_open_sessions(db: Database) -> int:
    """Active sessions of people (not bots), one autocommit statement."""
    async with db.connection() as conn:
        return await repository.count_open_sessions(conn)


# A page of an owner's sessions: the repository's device_history or user_history.
Sessions = Callable[[Connection, uuid.UUID, repository.After, int], Awaitable[list[Any]]]


async def _page(
    reads: Reads,
    sessions: Sessions,
    owner: uuid.UUID,
    limit: int,
    cursor: str | None,
    now: datetime,
) -> HistoryPage:
    after = Cursor.decode(cursor, now=now) if cursor else None

    async def read(conn: Connection) -> tuple[list[Any], list[dict[str, Any]]]:
        rows = await sessions(
            conn, owner, None if after is None else (after.created_at, after.session_id), limit + 1
        )
        return rows, await _with_children(conn, rows[:limit])

    # Run again whole on the primary, should the replica fail it.
    rows, items = await reads.run(read)
    page = rows[:limit]
    next_cursor = None
    if len(rows) > limit:
        last = page[-1]
        next_cursor = Cursor(last["created_at"], last["id"]).encode()
    return HistoryPage(items, next_cursor)


async def _with_children(conn: Connection, sessions: list[Any]) -> list[dict[str, Any]]:
    ids = [row["id"] for row in sessions]
    actions: dict[uuid.UUID, list[dict[str, Any]]] = defaultdict(list)
    views: dict[uuid.UUID, list[dict[str, Any]]] = defaultdict(list)
    for row in await repository.history_actions(conn, ids, CHILDREN_PER_SESSION):
        actions[row["session_id"]].append(
            {
                "actionId": row["id"],
                "type": row["type"],
                "propertyObjectId": row["property_object_id"],
                "data": row["data"],
                "userId": row["user_id"],
                "createdAt": row["created_at"],
            }
        )
    for row in await repository.history_views(conn, ids, CHILDREN_PER_SESSION):
        views[row["session_id"]].append(
            {
                "viewId": row["id"],
                "propertyObjectId": row["property_object_id"],
                "userId": row["user_id"],
                "startedAt": row["started_at"],
                "endedAt": row["ended_at"],
                "durationSeconds": open_or_duration_seconds(row["duration"]),
            }
        )
    return [_session_item(row, actions[row["id"]], views[row["id"]]) for row in sessions]


def _session_item(
    row: Any, actions: list[dict[str, Any]], views: list[dict[str, Any]]
) -> dict[str, Any]:
    # The device's IP address and raw user agent are never part of a response.
    return {
        "sessionId": row["id"],
        "anonymousId": row["anonymous_id"],
        "userId": row["user_id"],
        "linkedAt": row["linked_at"],
        "status": row["status"],
        "createdAt": row["created_at"],
        "lastActivityAt": row["last_activity_at"],
        "endedAt": row["ended_at"],
        "durationSeconds": open_or_duration_seconds(row["duration"]),
        "device": {
            "type": row["device_type"],
            "os": row["device_os"],
            "browser": row["device_browser"],
        },
        "actions": actions,
        "views": views,
    }

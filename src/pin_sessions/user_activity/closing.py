"""THE close operation (INV-SES-005): link's force-close and ActivityCloserJob share it.

Set-based: it closes any number of sessions in three statements on the caller's
connection, inside the caller's transaction, and never commits.

Every session that closes publishes exactly one session-ended, a bot's (DeviceType ``Bot``)
included: the event is the one record of every session's end, and it carries nothing about
the device, so its consumers count every closed session alike.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from pin_sessions.platform.database import Connection
from pin_sessions.platform.outbox import IntegrationEvent, append_all
from pin_sessions.user_activity import events, repository


@dataclass(frozen=True)
class ClosedSessions:
    """What one call closed: the sessions that were still Active, and their open views."""

    session_ids: tuple[uuid.UUID, ...]
    views_closed: int


async def close_sessions(
    conn: Connection,
    session_ids: Sequence[uuid.UUID],
    *,
    now: datetime,
    idle_before: datetime | None = None,
) -> ClosedSessions:
    """Close those of ``session_ids`` that are still Active, with their views and events.

    Each session: ``Inactive``, ``ended_at = now``, ``duration = last_activity_at -
    created_at``; its open views end at its ``last_activity_at`` (never before their
    start), each with a property-object-view-ended event; then its session-ended event.
    A session already Inactive is left alone (INV-SES-006), so a session ends at most
    once, whoever races to close it. With ``idle_before``, a session whose activity is
    not older than that instant is kept open: the closer's re-check of its threshold.
    """
    if not session_ids:
        return ClosedSessions((), 0)
    closed = await repository.close_sessions(conn, session_ids, now, idle_before)
    if not closed:
        return ClosedSessions((), 0)
    closed_ids = [session.id for session in closed]
    views = await repository.close_open_views(conn, closed_ids)
    published: list[IntegrationEvent] = [
        events.property_object_view_ended(
            view_id=view["id"],
            session_id=view["session_id"],
            property_object_id=view["property_object_id"],
            user_id=view["user_id"],
            started_at=view["started_at"],
            ended_at=view["ended_at"],
            duration=view["duration"],
        )
        for view in views
    ]
    published.extend(events.session_ended(session) for session in closed)
    await append_all(conn, published, now=now)
    return ClosedSessions(tuple(closed_ids), len(views))

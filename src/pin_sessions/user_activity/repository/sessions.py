"""The Session aggregate's statements: start and heartbeat, link, close (INV-SES-001…006)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from pin_sessions.platform.ids import new_id
from pin_sessions.user_activity.domain import (
    DeviceInfo,
    DeviceLink,
    EndedSession,
    ExtendedSession,
    SessionSnapshot,
    SessionStatus,
    SignedInCaller,
)
from pin_sessions.user_activity.errors import SessionAlreadyEnded
from pin_sessions.user_activity.repository.loaded import QUERIES

if TYPE_CHECKING:
    import asyncpg

    from pin_sessions.platform.database import Connection


def snapshot(row: Any) -> SessionSnapshot:
    """The session a statement returned (``id`` … ``last_activity_at``)."""
    return SessionSnapshot(
        id=row["id"],
        anonymous_id=row["anonymous_id"],
        user_id=row["user_id"],
        linked_at=row["linked_at"],
        signed_in_at=row["signed_in_at"],
        status=SessionStatus(row["status"]),
        created_at=row["created_at"],
        last_activity_at=row["last_activity_at"],
    )


async def extend_sessions(
    conn: Connection, activity: Mapping[uuid.UUID, datetime]
) -> tuple[dict[uuid.UUID, ExtendedSession], list[uuid.UUID]]:
    """Extend each device's Active session to its time, skipping rows other transactions
    hold: the extended sessions, and the devices whose Active row was locked."""
    devices = sorted(activity)
    rows = await QUERIES.heartbeat_batch.fetch(
        conn, anonymous_ids=devices, ats=[activity[device] for device in devices]
    )
    extended = {
        device: ExtendedSession(session_id, at)
        for device, session_id, at in rows
        if session_id is not None
    }
    locked = [device for device, session_id, _ in rows if session_id is None]
    return extended, locked


async def extend_session(
    conn: Connection, anonymous_id: uuid.UUID, now: datetime
) -> ExtendedSession | None:
    """Extend one device's Active session to ``now``, waiting for its row if it is locked."""
    row = await QUERIES.heartbeat_one.fetchrow(conn, anonymous_id=anonymous_id, at=now)
    return None if row is None else ExtendedSession(row["id"], row["last_activity_at"])


async def continue_or_start(
    conn: Connection,
    anonymous_id: uuid.UUID,
    device: DeviceInfo,
    now: datetime,
    *,
    caller: SignedInCaller | None = None,
) -> tuple[SessionSnapshot, bool]:
    """The device's Active session, extended as it is, or a new one; True when started.

    A new session is ``caller``'s, unless another user linked the device since the
    caller's sign-in: then it is a guest's.
    """
    proposed = new_id()
    row = await QUERIES.continue_or_start_session.fetchrow(
        conn,
        user_id=None if caller is None else caller.user_id,
        anonymous_id=anonymous_id,
        signed_in_at=None if caller is None else caller.signed_in_at,
        id=proposed,
        now=now,
        user_agent=device.user_agent,
        device_type=device.device_type.value,
        os=device.os,
        browser=device.browser,
        ip_address=device.ip_address,
    )
    session = snapshot(row)
    return session, session.id == proposed


async def insert_session(
    conn: Connection,
    anonymous_id: uuid.UUID,
    device: DeviceInfo,
    now: datetime,
    *,
    link: DeviceLink | None = None,
) -> SessionSnapshot | None:
    """A new Active session, a guest's or ``link``'s (linked ``now``); None when the device
    already has one (INV-SES-001)."""
    row = await QUERIES.insert_session.fetchrow(
        conn,
        id=new_id(),
        anonymous_id=anonymous_id,
        user_id=None if link is None else link.user_id,
        now=now,
        signed_in_at=None if link is None else link.signed_in_at,
        user_agent=device.user_agent,
        device_type=device.device_type.value,
        os=device.os,
        browser=device.browser,
        ip_address=device.ip_address,
    )
    return None if row is None else snapshot(row)


async def latest_link_since(
    conn: Connection, anonymous_id: uuid.UUID, since: datetime
) -> DeviceLink | None:
    """The device's latest link standing for a sign-in later than ``since``."""
    row = await QUERIES.select_latest_link_since.fetchrow(
        conn, anonymous_id=anonymous_id, since=since
    )
    return None if row is None else DeviceLink(row["user_id"], row["signed_in_at"])


async def lock_active_session(conn: Connection, anonymous_id: uuid.UUID) -> SessionSnapshot | None:
    """The device's Active session, locked until the transaction ends; None: it has none."""
    row = await QUERIES.lock_active_session.fetchrow(conn, anonymous_id=anonymous_id)
    return None if row is None else snapshot(row)


async def link_session(
    conn: Connection, session_id: uuid.UUID, link: DeviceLink, now: datetime
) -> SessionSnapshot:
    """The unlinked Active session, linked ``now`` to ``link``'s user (INV-SES-002).

    ``SessionAlreadyEnded`` when it is no longer Active (INV-SES-006).
    """
    row = await QUERIES.link_session.fetchrow(
        conn, id=session_id, user_id=link.user_id, now=now, signed_in_at=link.signed_in_at
    )
    if row is None:
        raise SessionAlreadyEnded()
    return snapshot(row)


async def insert_switched_session(
    conn: Connection, replaced: uuid.UUID, link: DeviceLink, now: datetime
) -> SessionSnapshot:
    """The Active successor of the force-closed ``replaced``: its device, ``link``'s user."""
    row = await QUERIES.insert_switched_session.fetchrow(
        conn,
        id=new_id(),
        replaced=replaced,
        user_id=link.user_id,
        signed_in_at=link.signed_in_at,
        now=now,
    )
    return snapshot(row)


async def close_sessions(
    conn: Connection,
    session_ids: Sequence[uuid.UUID],
    now: datetime,
    idle_before: datetime | None,
) -> list[EndedSession]:
    """Those of ``session_ids`` still Active (and idle before ``idle_before``, when given)
    → Inactive at ``now``: each as its close left it, what its session-ended says."""
    rows = await QUERIES.close_sessions.fetch(
        conn, ids=list(session_ids), ended_at=now, idle_before=idle_before
    )
    return [
        EndedSession(
            id=row["id"],
            anonymous_id=row["anonymous_id"],
            user_id=row["user_id"],
            created_at=row["created_at"],
            last_activity_at=row["last_activity_at"],
            duration=row["duration"],
        )
        for row in rows
    ]


async def close_open_views(
    conn: Connection, session_ids: Sequence[uuid.UUID]
) -> list[asyncpg.Record]:
    """The open views of closed sessions end with them: one row each, for their events."""
    return await QUERIES.close_open_views.fetch(conn, session_ids=list(session_ids))


async def issue_anonymous_id(
    conn: Connection,
    key: str,
    proposed: uuid.UUID,
    now: datetime,
    *,
    expired_before: datetime,
) -> uuid.UUID:
    """The AnonymousId issued under a start's ``key``: ``proposed`` unless a start with the
    same key, issued after ``expired_before``, got one first."""
    issued: uuid.UUID = await QUERIES.issue_anonymous_id.fetchval(
        conn, key=key, anonymous_id=proposed, now=now, expired_before=expired_before
    )
    return issued

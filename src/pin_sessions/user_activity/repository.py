"""The statements of the Session aggregate that more than one operation runs, and a
user's erasure (``queries.sql``).

Functions take the caller's connection and never commit.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from pin_sessions.platform.batching import rows_affected
from pin_sessions.platform.database import Connection
from pin_sessions.platform.erasure import Tombstones
from pin_sessions.platform.ids import new_id
from pin_sessions.platform.queries import Query, load_queries
from pin_sessions.user_activity import sql
from pin_sessions.user_activity.domain import (
    DeviceInfo,
    DeviceLink,
    ExtendedSession,
    SessionSnapshot,
    SessionStatus,
    SignedInCaller,
)

QUERIES = load_queries(__package__)

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


def snapshot(row: Any) -> SessionSnapshot:
    return SessionSnapshot(
        id=row["id"],
        anonymous_id=row["anonymous_id"],
        user_id=row["user_id"],
        linked_at=row["linked_at"],
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
    rows = await conn.fetch(sql.HEARTBEAT_BATCH, devices, [activity[device] for device in devices])
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
    row = await conn.fetchrow(sql.HEARTBEAT_ONE, anonymous_id, now)
    return None if row is None else ExtendedSession(row["id"], row["last_activity_at"])


def _new_session(
    session_id: uuid.UUID,
    anonymous_id: uuid.UUID,
    device: DeviceInfo,
    now: datetime,
    user_id: uuid.UUID | None,
) -> tuple[Any, ...]:
    """The parameters of a new session's row, in the order both inserts take them."""
    return (
        session_id,
        anonymous_id,
        user_id,
        now,
        device.user_agent,
        device.device_type.value,
        device.os,
        device.browser,
        device.ip_address,
    )


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
    caller's sign-in: then it is a guest's (SPEC §11).
    """
    proposed = new_id()
    user_id, signed_in_at = (
        (None, None) if caller is None else (caller.user_id, caller.signed_in_at)
    )
    row = await conn.fetchrow(
        sql.CONTINUE_OR_START_SESSION,
        *_new_session(proposed, anonymous_id, device, now, user_id),
        signed_in_at,
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
    """A new Active session, a guest's or ``link``'s; None when the device already has one
    (INV-SES-001)."""
    user_id, linked_at = (None, None) if link is None else (link.user_id, link.linked_at)
    row = await conn.fetchrow(
        sql.INSERT_SESSION, *_new_session(new_id(), anonymous_id, device, now, user_id), linked_at
    )
    return None if row is None else snapshot(row)


async def latest_link_since(
    conn: Connection, anonymous_id: uuid.UUID, since: datetime
) -> DeviceLink | None:
    """The device's latest link standing for a sign-in later than ``since``."""
    row = await conn.fetchrow(sql.SELECT_LATEST_LINK_SINCE, anonymous_id, since)
    return None if row is None else DeviceLink(row["user_id"], row["linked_at"])


async def end_erased_user_sessions(conn: Connection, user_id: uuid.UUID, now: datetime) -> None:
    """The erased user's Active sessions become Inactive, publishing nothing (SPEC §10)."""
    await QUERIES.end_erased_user_sessions.execute(conn, user_id=user_id, ended_at=now)


async def delete_erased_user_rows(
    conn: Connection, delete: Query, user_id: uuid.UUID, batch_size: int
) -> int:
    """One batch of ``delete`` (one of ``ERASURE_DELETES``): how many rows went."""
    return rows_affected(await delete.execute(conn, user_id=user_id, batch_size=batch_size))

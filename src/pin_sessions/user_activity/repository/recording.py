"""What a device records in its session: actions, views, and its ``Idempotency-Key``\\ s."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from pin_sessions.user_activity.repository.loaded import QUERIES

if TYPE_CHECKING:
    import asyncpg

    from pin_sessions.platform.database import Connection
    from pin_sessions.user_activity.domain import SessionSnapshot


async def insert_action(
    conn: Connection,
    action_id: uuid.UUID,
    session: SessionSnapshot,
    now: datetime,
    *,
    action_type: str,
    property_object_id: uuid.UUID | None,
    data: Any,
) -> None:
    """The action, in ``session``, with its owner's id as it is now (seed 003)."""
    await QUERIES.insert_action.execute(
        conn,
        id=action_id,
        session_id=session.id,
        user_id=session.user_id,
        type=action_type,
        property_object_id=property_object_id,
        data=data,
        created_at=now,
    )


async def insert_view(
    conn: Connection,
    view_id: uuid.UUID,
    session: SessionSnapshot,
    property_object_id: uuid.UUID,
    now: datetime,
) -> None:
    """An open view of ``property_object_id`` in ``session``, started ``now``."""
    await QUERIES.insert_view.execute(
        conn,
        id=view_id,
        session_id=session.id,
        property_object_id=property_object_id,
        user_id=session.user_id,
        started_at=now,
    )


async def end_view(
    conn: Connection, view_id: uuid.UUID, anonymous_id: uuid.UUID, now: datetime
) -> asyncpg.Record | None:
    """The device's open view, ended at ``now`` (never before it began): its row, for its
    event; None when it is not open, or not the device's."""
    return await QUERIES.end_view.fetchrow(
        conn, id=view_id, anonymous_id=anonymous_id, ended_at=now
    )


async def view_on_device(
    conn: Connection, view_id: uuid.UUID, anonymous_id: uuid.UUID
) -> asyncpg.Record | None:
    """The device's view (``id``, ``duration``); None when the device has no such view."""
    return await QUERIES.select_view_on_device.fetchrow(conn, id=view_id, anonymous_id=anonymous_id)


async def reserve_idempotency_key(
    conn: Connection,
    anonymous_id: uuid.UUID,
    key: str,
    request_hash: bytes,
    now: datetime,
    expired_before: datetime,
) -> bool:
    """Reserve the device's key for this request, waiting for a transaction that holds it;
    False when a request committed it first, within its lifetime."""
    reserved = await QUERIES.reserve_idempotency_key.fetchval(
        conn,
        anonymous_id=anonymous_id,
        key=key,
        request_hash=request_hash,
        created_at=now,
        expired_before=expired_before,
    )
    return reserved is not None


async def idempotency_key(
    conn: Connection, anonymous_id: uuid.UUID, key: str
) -> asyncpg.Record | None:
    """The key's first request (``request_hash``) and its answer (``response``)."""
    return await QUERIES.select_idempotency_key.fetchrow(conn, anonymous_id=anonymous_id, key=key)


async def remember_idempotent_response(
    conn: Connection, anonymous_id: uuid.UUID, key: str, answer: Mapping[str, Any]
) -> None:
    """The answer, with the key this transaction reserved."""
    await QUERIES.remember_idempotent_response.execute(
        conn, anonymous_id=anonymous_id, key=key, response=answer
    )

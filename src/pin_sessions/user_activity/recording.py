"""Recording what a device does: actions and property views (SPEC §4).

Recording is activity: an action or a view extends (or restarts) the device's session it
is recorded in, in the same transaction. With an ``Idempotency-Key`` (SPEC §8), a repeat
records nothing and answers as the first did (``idempotency``).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from pin_sessions.platform.database import Connection, Database
from pin_sessions.platform.ids import new_id
from pin_sessions.platform.outbox import append
from pin_sessions.user_activity import events, repository
from pin_sessions.user_activity import idempotency as idempotency_keys
from pin_sessions.user_activity.domain import DeviceInfo, SignedInCaller
from pin_sessions.user_activity.errors import ViewNotFound
from pin_sessions.user_activity.sessions import callers_session


@dataclass(frozen=True)
class Idempotency:
    """A request's ``Idempotency-Key`` and what it asks for (``idempotency.request_hash``)."""

    key: str
    request_hash: bytes


@dataclass(frozen=True)
class RecordedAction:
    action_id: uuid.UUID
    session_id: uuid.UUID


@dataclass(frozen=True)
class StartedView:
    view_id: uuid.UUID
    session_id: uuid.UUID
    started_at: datetime


@dataclass(frozen=True)
class EndedView:
    view_id: uuid.UUID
    duration: timedelta


async def record_action(
    db: Database,
    anonymous_id: uuid.UUID,
    caller: SignedInCaller | None,
    device: DeviceInfo,
    now: datetime,
    *,
    action_type: str,
    property_object_id: uuid.UUID | None,
    data: Any,
    idempotency: Idempotency | None = None,
) -> RecordedAction:
    """An action is activity: it extends (or restarts) the device's session it is recorded in.

    A repeat of a keyed request records nothing and answers as the first did.
    """
    async with db.transaction() as conn:
        if idempotency is not None:
            first = await _first_answer(conn, anonymous_id, idempotency, now)
            if first is not None:
                return RecordedAction(uuid.UUID(first["actionId"]), uuid.UUID(first["sessionId"]))
        action_id = new_id()
        started = await callers_session(conn, anonymous_id, caller, device, now)
        session = started.session
        await repository.insert_action(
            conn,
            action_id,
            session,
            now,
            action_type=action_type,
            property_object_id=property_object_id,
            data=data,
        )
        if idempotency is not None:
            answer = {"actionId": str(action_id), "sessionId": str(session.id)}
            await idempotency_keys.remember(conn, anonymous_id, idempotency.key, answer)
    return RecordedAction(action_id, session.id)


async def start_view(
    db: Database,
    anonymous_id: uuid.UUID,
    caller: SignedInCaller | None,
    device: DeviceInfo,
    now: datetime,
    *,
    property_object_id: uuid.UUID,
    idempotency: Idempotency | None = None,
) -> StartedView:
    """A view is activity too, recorded in the device's session like an action."""
    async with db.transaction() as conn:
        if idempotency is not None:
            first = await _first_answer(conn, anonymous_id, idempotency, now)
            if first is not None:
                return StartedView(
                    uuid.UUID(first["viewId"]),
                    uuid.UUID(first["sessionId"]),
                    datetime.fromisoformat(first["startedAt"]),
                )
        view_id = new_id()
        started = await callers_session(conn, anonymous_id, caller, device, now)
        session = started.session
        await repository.insert_view(conn, view_id, session, property_object_id, now)
        if idempotency is not None:
            answer = {
                "viewId": str(view_id),
                "sessionId": str(session.id),
                "startedAt": now.isoformat(),
            }
            await idempotency_keys.remember(conn, anonymous_id, idempotency.key, answer)
    return StartedView(view_id, session.id, now)


async def _first_answer(
    conn: Connection, anonymous_id: uuid.UUID, idempotency: Idempotency, now: datetime
) -> Mapping[str, Any] | None:
    return await idempotency_keys.first_answer(
        conn, anonymous_id, idempotency.key, idempotency.request_hash, now
    )


async def end_view(
    db: Database, anonymous_id: uuid.UUID, view_id: uuid.UUID, now: datetime
) -> EndedView:
    """Idempotent: the first end closes the view and publishes; later ones report it."""
    async with db.transaction() as conn:
        ended = await repository.end_view(conn, view_id, anonymous_id, now)
        if ended is not None:
            event = events.property_object_view_ended(
                view_id=ended["id"],
                session_id=ended["session_id"],
                property_object_id=ended["property_object_id"],
                user_id=ended["user_id"],
                started_at=ended["started_at"],
                ended_at=ended["ended_at"],
                duration=ended["duration"],
            )
            await append(conn, event, now=now)
            return EndedView(view_id, ended["duration"])
        existing = await repository.view_on_device(conn, view_id, anonymous_id)
    if existing is None:
        raise ViewNotFound()
    # Ended before: by an earlier call or by its session's close (which waited for no one).
    duration: timedelta = existing["duration"]
    return EndedView(view_id, duration)

"""The use cases of user-activity's Session API, one function each.

Every function opens its own transaction (or autocommit statement) on the database and
takes ``now`` from its caller: only the server clock sets times (INV-SES-004).
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import structlog

from pin_sessions.platform.database import Connection, Database
from pin_sessions.platform.ids import new_id
from pin_sessions.platform.outbox import append
from pin_sessions.user_activity import events, repository, sql
from pin_sessions.user_activity import idempotency as idempotency_keys
from pin_sessions.user_activity.domain import DeviceInfo, SessionSnapshot, SignedInCaller
from pin_sessions.user_activity.errors import ViewNotFound
from pin_sessions.user_activity.heartbeats import Heartbeats
from pin_sessions.user_activity.linking import LinkOutcome, link_request, linked_event
from pin_sessions.user_activity.user_data import refuse_erased

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class Started:
    session: SessionSnapshot
    created: bool


@dataclass(frozen=True)
class HeartbeatResult:
    session_id: uuid.UUID
    last_activity_at: datetime
    restarted: bool


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


async def active_session(
    conn: Connection,
    anonymous_id: uuid.UUID,
    device: DeviceInfo,
    now: datetime,
    *,
    caller: SignedInCaller | None = None,
) -> Started:
    """Extend the device's Active session, or start one (INV-SES-001, INV-SES-003).

    One statement: racing callers all end on the one session the partial unique index let
    in, each loser extending the winner's. The session is extended as it is, whoever calls:
    only linking changes who is on a device (SPEC §11). A new session is ``caller``'s,
    unless another user linked the device after the caller's sign-in: then a guest's.
    """
    session, created = await repository.continue_or_start(
        conn, anonymous_id, device, now, caller=caller
    )
    if created:
        # The logging processor masks clientIp to its /24 (/48); it is never written whole.
        log.info(
            "user-activity session started",
            sessionId=str(session.id),
            deviceType=device.device_type.value,
            clientIp=device.ip_address,
        )
        if session.user_id is not None:
            await append(conn, linked_event(session), now=now)
        elif caller is not None:
            log.info(
                "stale token started a guest session",
                sessionId=str(session.id),
                userId=str(caller.user_id),
                signedInAt=caller.signed_in_at.isoformat(),
            )
    return Started(session, created=created)


async def start_session(
    db: Database,
    anonymous_id: uuid.UUID | None,
    caller: SignedInCaller | None,
    device: DeviceInfo,
    now: datetime,
) -> Started:
    """Start or continue the device's session (INV-SES-001)."""
    anonymous_id = anonymous_id or new_id()
    async with db.transaction() as conn:
        return await callers_session(conn, anonymous_id, caller, device, now)


async def callers_session(
    conn: Connection,
    anonymous_id: uuid.UUID,
    caller: SignedInCaller | None,
    device: DeviceInfo,
    now: datetime,
) -> Started:
    """The device's Active session, continued as it is or started, for a request.

    A Bearer token does not make the device its user's: a stale tab (a token of a user
    another has signed in after, on this device) would otherwise take the device back from
    the later sign-in. Who is on the device changes by linking alone (SPEC §11).
    """
    await refuse_erased(conn, None if caller is None else caller.user_id)
    return await active_session(conn, anonymous_id, device, now, caller=caller)


# Who is calling and from which device: read only when a heartbeat must start a session.
Newcomer = Callable[[], Awaitable[tuple[SignedInCaller | None, DeviceInfo]]]


async def heartbeat(
    heartbeats: Heartbeats,
    db: Database,
    anonymous_id: uuid.UUID,
    now: datetime,
    *,
    newcomer: Newcomer,
) -> HeartbeatResult:
    """Extend the device's Active session in the next group-committed UPDATE; only when it
    has none does a session start (INV-SES-003), and then nothing runs that UPDATE again."""
    session = await heartbeats.extend(anonymous_id, now)
    if session is not None:
        return HeartbeatResult(session.id, session.last_activity_at, restarted=False)
    caller, device = await newcomer()
    started = await start_session(db, anonymous_id, caller, device, now)
    return HeartbeatResult(
        started.session.id, started.session.last_activity_at, restarted=started.created
    )


async def link(
    db: Database,
    anonymous_id: uuid.UUID,
    caller: SignedInCaller,
    device: DeviceInfo,
    now: datetime,
) -> LinkOutcome:
    """``POST /sessions/link``: INV-SES-002 in one transaction, unless stale (SPEC §11)."""
    async with db.transaction() as conn:
        await refuse_erased(conn, caller.user_id)
        return await link_request(conn, anonymous_id, caller, device, now)


@dataclass(frozen=True)
class Idempotency:
    """A request's ``Idempotency-Key`` and what it asks for (``idempotency.request_hash``)."""

    key: str
    request_hash: bytes


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
        await conn.execute(
            sql.INSERT_ACTION,
            action_id,
            session.id,
            session.user_id,
            action_type,
            property_object_id,
            data,
            now,
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
        await conn.execute(
            sql.INSERT_VIEW, view_id, session.id, property_object_id, session.user_id, now
        )
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


async def count_open_sessions(db: Database) -> int:
    """Active sessions of people (not bots), one autocommit statement."""
    async with db.connection() as conn:
        count: int = await conn.fetchval(sql.COUNT_OPEN_SESSIONS)
    return count


async def end_view(
    db: Database, anonymous_id: uuid.UUID, view_id: uuid.UUID, now: datetime
) -> EndedView:
    """Idempotent: the first end closes the view and publishes; later ones report it."""
    async with db.transaction() as conn:
        ended = await conn.fetchrow(sql.END_VIEW, view_id, anonymous_id, now)
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
        existing = await conn.fetchrow(sql.SELECT_VIEW_ON_DEVICE, view_id, anonymous_id)
    if existing is None:
        raise ViewNotFound()
    # Ended before: by an earlier call or by its session's close (which waited for no one).
    duration: timedelta = existing["duration"]
    return EndedView(view_id, duration)

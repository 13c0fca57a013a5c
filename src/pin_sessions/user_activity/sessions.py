"""Starting and continuing a device's session: ``POST /sessions/start`` and the heartbeat.

Each use case opens its own transaction and takes ``now`` from its caller: only the
server clock sets times (INV-SES-004). A heartbeat that finds its device's Active session
is its share of one group-committed UPDATE (``heartbeats``); only one that finds none
starts a session here.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

import structlog

from pin_sessions.platform.database import Connection, Database
from pin_sessions.platform.ids import new_id
from pin_sessions.platform.outbox import append
from pin_sessions.user_activity import repository
from pin_sessions.user_activity.domain import (
    DeviceInfo,
    SessionSnapshot,
    SessionStarted,
    SignedInCaller,
)
from pin_sessions.user_activity.heartbeats import Heartbeats
from pin_sessions.user_activity.linking import linked_event
from pin_sessions.user_activity.user_data import refuse_erased

log = structlog.get_logger(__name__)

# How long a start's Idempotency-Key keeps the AnonymousId issued under it.
ISSUED_ID_LIFETIME = timedelta(hours=24)


@dataclass(frozen=True)
class Started:
    session: SessionSnapshot
    created: bool


@dataclass(frozen=True)
class HeartbeatResult:
    session_id: uuid.UUID
    last_activity_at: datetime
    restarted: bool


async def start_session(
    db: Database,
    anonymous_id: uuid.UUID | None,
    caller: SignedInCaller | None,
    device: DeviceInfo,
    now: datetime,
    *,
    idempotency_key: str | None = None,
) -> Started:
    """Start or continue the device's session (INV-SES-001).

    Without ``anonymous_id`` this context issues the device's AnonymousId; with an
    ``idempotency_key``, every start sent with that key within ``ISSUED_ID_LIFETIME`` gets
    the same id, and so the same session.
    """
    if caller is None:
        # A guest's is one statement, never an event (only a user's new session publishes
        # one) and no tombstone to check: BEGIN and COMMIT would double its round trips.
        async with db.connection() as conn:
            device_id = anonymous_id or await _issued_id(conn, idempotency_key, now)
            return await active_session(conn, device_id, device, now)
    async with db.transaction() as conn:
        device_id = anonymous_id or await _issued_id(conn, idempotency_key, now)
        return await callers_session(conn, device_id, caller, device, now)


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
    the later sign-in. Who is on the device changes by linking alone.
    """
    await refuse_erased(conn, None if caller is None else caller.user_id)
    return await active_session(conn, anonymous_id, device, now, caller=caller)


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
    only linking changes who is on a device. A new session is ``caller``'s,
    unless another user linked the device after the caller's sign-in: then a guest's.
    """
    session, created = await repository.continue_or_start(
        conn, anonymous_id, device, now, caller=caller
    )
    if created:
        _log_started(session.started(), device)
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


async def _issued_id(conn: Connection, key: str | None, now: datetime) -> uuid.UUID:
    """A new AnonymousId, or the one issued to an earlier start with the same key."""
    if key is None:
        return new_id()
    return await repository.issue_anonymous_id(
        conn, key, new_id(), now, expired_before=now - ISSUED_ID_LIFETIME
    )


def _log_started(started: SessionStarted, device: DeviceInfo) -> None:
    # The logging processor masks clientIp to its /24 (/48); it is never written whole.
    log.info(
        "session started",
        sessionId=str(started.session_id),
        anonymousId=str(started.anonymous_id),
        userId=None if started.user_id is None else str(started.user_id),
        deviceType=device.device_type.value,
        clientIp=device.ip_address,
    )


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

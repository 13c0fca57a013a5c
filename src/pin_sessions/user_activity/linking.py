"""Linking a device's session to a user (INV-SES-002): the only change of who is on a device.

Two callers link: the consumer of ``pin.identity.sign-ins.v1`` (``link_sign_in``, in the
runner's transaction) and ``POST /api/user-activity/sessions/link`` (``link``, in its own;
``link_request`` is its work on that transaction's connection). A start, a heartbeat, an
action or a view never does.

The latest sign-in owns the device. A link is made ``now`` (its session's ``linked_at``, the
moment of linking) and stands for a sign-in, whose instant it keeps as ``signed_in_at`` (a
sign-in event's ``SignedInAt``, a token's ``auth_time``, both to the microsecond), so links
are ordered by when their users signed in, whatever order they arrive in:

* a sign-in event older than the device's current session (its ``signed_in_at``, or
  ``created_at`` while unlinked) is stale;
* a request whose token's sign-in is older than another user's link on the device is stale.

A stale link changes nothing. Linkers of one device are serialised by the row lock on its
Active session (or, with none, by its partial unique index), and each judges staleness
after taking it, so two racing links have one winner by construction.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

import structlog
from prometheus_client import CollectorRegistry, Counter

from pin_sessions.platform.database import Connection, Database
from pin_sessions.platform.errors import ServiceUnavailable
from pin_sessions.platform.outbox import IntegrationEvent, append
from pin_sessions.user_activity import events, repository
from pin_sessions.user_activity.closing import close_sessions
from pin_sessions.user_activity.domain import (
    DeviceInfo,
    DeviceLink,
    SessionSnapshot,
    SignedInCaller,
    is_stale_request,
)
from pin_sessions.user_activity.user_data import refuse_erased

# Each retry follows a concurrent change that committed first; a handful always suffices.
MAX_ATTEMPTS = 5

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class LinkOutcome:
    """The device's Active session once linked; ``switched`` when another user's was closed.

    ``stale``: a later sign-in owns the device; its session is returned as it was.
    """

    session: SessionSnapshot
    switched: bool
    created: bool
    stale: bool = False


async def link_sign_in(
    conn: Connection,
    anonymous_id: uuid.UUID,
    user_id: uuid.UUID,
    signed_in_at: datetime,
    now: datetime,
) -> LinkOutcome | None:
    """A sign-in event: link the device's Active session for the sign-in at ``signed_in_at``.

    None when the device has no Active session: nothing is started for an event.
    """
    for attempt in range(MAX_ATTEMPTS):
        current = await _lock_active_session(conn, anonymous_id)
        if current is None:
            # A concurrent switch may have replaced the session after this statement's
            # snapshot; the next statement sees its successor.
            if attempt == 0:
                continue
            return None
        if current.user_id == user_id:
            return LinkOutcome(current, switched=False, created=False)
        if is_stale_sign_in(current, signed_in_at):
            return LinkOutcome(current, switched=False, created=False, stale=True)
        return await _link(conn, current, DeviceLink(user_id, signed_in_at), now)
    raise ServiceUnavailable("the device's session kept changing; retry the request")


async def link(
    db: Database,
    anonymous_id: uuid.UUID,
    caller: SignedInCaller,
    device: DeviceInfo,
    now: datetime,
) -> LinkOutcome:
    """``POST /sessions/link``: INV-SES-002 in one transaction, unless stale."""
    async with db.transaction() as conn:
        await refuse_erased(conn, caller.user_id)
        return await link_request(conn, anonymous_id, caller, device, now)


async def link_request(
    conn: Connection,
    anonymous_id: uuid.UUID,
    caller: SignedInCaller,
    device: DeviceInfo,
    now: datetime,
) -> LinkOutcome:
    """``POST /sessions/link``: link the device's Active session to the caller.

    With no Active session, one starts from ``device``. Stale (another user linked the
    device after the caller's sign-in): the session is left as it is, or a guest's starts.
    """
    for _ in range(MAX_ATTEMPTS):
        current = await _lock_active_session(conn, anonymous_id)
        if current is not None and current.user_id == caller.user_id:
            return LinkOutcome(current, switched=False, created=False)
        latest = await _latest_link_since(conn, anonymous_id, current, caller.signed_in_at)
        stale = is_stale_request(caller, latest)
        if current is not None:
            if stale:
                return LinkOutcome(current, switched=False, created=False, stale=True)
            return await _link(conn, current, _caller_link(caller, latest), now)
        link = None if stale else _caller_link(caller, latest)
        started = await repository.insert_session(conn, anonymous_id, device, now, link=link)
        if started is None:
            continue  # another start or link won the device: judge again against its session
        if link is not None:
            await append(conn, linked_event(started), now=now)
        return LinkOutcome(started, switched=False, created=True, stale=stale)
    raise ServiceUnavailable("the device's session kept changing; retry the request")


async def _latest_link_since(
    conn: Connection, anonymous_id: uuid.UUID, current: SessionSnapshot | None, since: datetime
) -> DeviceLink | None:
    """The device's latest link later than ``since``, read once its Active row is locked.

    A linked Active session holds the device's latest link: every link is made at least as
    late as all the device's links before it (a request's is never older than another
    user's, a sign-in event's never older than the session it joins), so its own row says.
    A guest's session or none: the device's history does. Either way every link that could
    still commit waits on the lock this transaction holds, or on the partial unique index.
    """
    if current is not None and current.user_id is not None and current.signed_in_at is not None:
        if current.signed_in_at > since:
            return DeviceLink(current.user_id, current.signed_in_at)
        return None
    return await repository.latest_link_since(conn, anonymous_id, since)


def _caller_link(caller: SignedInCaller, latest: DeviceLink | None) -> DeviceLink:
    """The caller's link, at the latest sign-in of theirs the device knows (their own later
    link, when there is one), so the session's ``signed_in_at`` stays the device's latest."""
    return DeviceLink(
        caller.user_id, caller.signed_in_at if latest is None else latest.signed_in_at
    )


async def _lock_active_session(conn: Connection, anonymous_id: uuid.UUID) -> SessionSnapshot | None:
    # FOR UPDATE serialises linkers of one device; a loser re-reads the winner's result.
    return await repository.lock_active_session(conn, anonymous_id)


async def _link(
    conn: Connection, current: SessionSnapshot, link: DeviceLink, now: datetime
) -> LinkOutcome:
    """Unlinked: ``link`` is set, with a session-linked event. Another user's: that session is
    force-closed through the one close operation (session-ended) and a new Active session of
    the same device opened for ``link``'s user (session-linked).

    ``current`` is locked by this transaction and Active; ``SessionAlreadyEnded`` if not.
    """
    current.ensure_active()
    if current.user_id is None:
        linked = await repository.link_session(conn, current.id, link, now)
        await append(conn, linked_event(linked), now=now)
        return LinkOutcome(linked, switched=False, created=False)
    await close_sessions(conn, [current.id], now=now)
    # The successor opens now, when the old one closes: their spans never overlap, so
    # dev-stats counts no minute twice (the old session may have activity after a late
    # sign-in's instant). Its signed_in_at is the sign-in's instant: the key later
    # sign-ins of this device are ordered against, in whatever order they arrive.
    successor = await repository.insert_switched_session(conn, current.id, link, now)
    await append(conn, linked_event(successor), now=now)
    return LinkOutcome(successor, switched=True, created=True)


class StaleLinks:
    """Links by request left without effect, logged and counted as the consumer does late
    sign-ins: how often a stale tab tries to take a device back, for an operator."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._stale = Counter(
            "user_activity_stale_links_total",
            "Links whose token's sign-in is older than another user's link on the device, "
            "left without effect",
            registry=registry,
        )

    def record(self, caller: SignedInCaller, outcome: LinkOutcome) -> None:
        self._stale.inc()
        log.info(
            "stale link ignored",
            userId=str(caller.user_id),
            sessionId=str(outcome.session.id),
            signedInAt=caller.signed_in_at.isoformat(),
        )


def is_stale_sign_in(current: SessionSnapshot, signed_in_at: datetime) -> bool:
    """A sign-in older than the device's current session cannot be its user's: older than
    the sign-in that linked it, or, while unlinked, than its start."""
    since = current.created_at if current.signed_in_at is None else current.signed_in_at
    return signed_in_at < since


def linked_event(session: SessionSnapshot) -> IntegrationEvent:
    """The session-linked event of a session that has just got its user."""
    return events.session_linked(session.linked())

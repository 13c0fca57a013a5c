"""Linking a device's session to a user (INV-SES-002).

The same operation serves ``POST /api/user-activity/sessions/link``, a signed-in caller's
start, action or view, and the consumer of ``pin.identity.sign-ins.v1``; it runs on the
caller's connection, in the caller's transaction.

A request is the user on the device now. A sign-in event may arrive late (SPEC §6): it
carries the instant of the sign-in, and one that is older than the device's current
session (its ``linked_at``, or ``created_at`` while unlinked) is stale and changes nothing.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from pin_sessions.platform.database import Connection
from pin_sessions.platform.errors import ServiceUnavailable
from pin_sessions.platform.ids import new_id
from pin_sessions.platform.outbox import IntegrationEvent, append
from pin_sessions.user_activity import events, repository, sql
from pin_sessions.user_activity.closing import close_sessions
from pin_sessions.user_activity.domain import DeviceInfo, SessionSnapshot

# Each retry follows a concurrent change that committed first; a handful always suffices.
MAX_ATTEMPTS = 5


@dataclass(frozen=True)
class LinkOutcome:
    """The device's Active session once linked; ``switched`` when another user's was closed.

    ``stale``: a late sign-in left the device's session, returned as it was, unchanged.
    """

    session: SessionSnapshot
    switched: bool
    created: bool
    stale: bool = False


async def link_device(
    conn: Connection,
    anonymous_id: uuid.UUID,
    user_id: uuid.UUID,
    now: datetime,
    *,
    device: DeviceInfo | None = None,
    signed_in_at: datetime | None = None,
) -> LinkOutcome | None:
    """Link the device's Active session to ``user_id``.

    Same user: nothing changes. Unlinked: ``user_id`` and ``linked_at`` are set, with a
    session-linked event. Another user's: that session is force-closed through the one
    close operation (session-ended) and a new Active session of the same device is
    opened for ``user_id`` (session-linked). With no Active session, ``device`` (when
    given) starts a linked one; without it nothing happens and None is returned.

    ``signed_in_at`` (a sign-in event's ``SignedInAt``) applies the staleness rule and
    becomes the ``linked_at``; a request links at ``now``.
    """
    linked_at = now if signed_in_at is None else signed_in_at
    for attempt in range(MAX_ATTEMPTS):
        # FOR UPDATE serialises linkers of one device; a loser re-reads the winner's result.
        row = await conn.fetchrow(sql.LOCK_ACTIVE_SESSION, anonymous_id)
        if row is None:
            if device is None:
                # A concurrent switch may have replaced the session after this statement's
                # snapshot; the next statement sees its successor.
                if attempt == 0:
                    continue
                return None
            started = await repository.insert_session(
                conn, anonymous_id, device, now, user_id=user_id
            )
            if started is None:
                continue
            await append(conn, linked_event(started), now=now)
            return LinkOutcome(started, switched=False, created=True)
        current = repository.snapshot(row)
        if current.user_id == user_id:
            return LinkOutcome(current, switched=False, created=False)
        if signed_in_at is not None and is_stale_sign_in(current, signed_in_at):
            return LinkOutcome(current, switched=False, created=False, stale=True)
        if current.user_id is None:
            linked = repository.snapshot(
                await conn.fetchrow(sql.LINK_SESSION, current.id, user_id, linked_at)
            )
            await append(conn, linked_event(linked), now=now)
            return LinkOutcome(linked, switched=False, created=False)
        await close_sessions(conn, [current.id], now=now)
        # The successor opens now, when the old one closes: their spans never overlap, so
        # dev-stats counts no minute twice (the old session may have activity after a late
        # sign-in's instant). Its linked_at is still the sign-in's instant: the key later
        # sign-ins of this device are ordered against, in whatever order they arrive.
        successor = repository.snapshot(
            await conn.fetchrow(
                sql.INSERT_SWITCHED_SESSION, new_id(), current.id, user_id, linked_at, now
            )
        )
        await append(conn, linked_event(successor), now=now)
        return LinkOutcome(successor, switched=True, created=True)
    raise ServiceUnavailable("the device's session kept changing; retry the request")


def is_stale_sign_in(current: SessionSnapshot, signed_in_at: datetime) -> bool:
    """SPEC §6: a sign-in older than the device's current session cannot be its user's."""
    since = current.created_at if current.linked_at is None else current.linked_at
    return signed_in_at < since


def linked_event(session: SessionSnapshot) -> IntegrationEvent:
    """The session-linked event of a session that has just got its user."""
    assert session.user_id is not None and session.linked_at is not None
    return events.session_linked(
        session_id=session.id,
        anonymous_id=session.anonymous_id,
        user_id=session.user_id,
        linked_at=session.linked_at,
    )

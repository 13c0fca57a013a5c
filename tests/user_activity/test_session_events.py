"""The Session's domain events — SessionStarted, SessionLinked, SessionEnded — raised by its
operations, the integration events built from them, the ``session started`` log event; and
the audit they allow: every closed session's user and duration rebuilt from session-linked
and session-ended alone. An Inactive session never changes (INV-SES-006)."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry

from pin_sessions.platform.clock import FixedClock
from pin_sessions.platform.ids import new_id
from pin_sessions.platform.runtime import Runtime
from pin_sessions.user_activity import repository
from pin_sessions.user_activity.domain import (
    DeviceLink,
    EndedSession,
    SessionEnded,
    SessionLinked,
    SessionSnapshot,
    SessionStarted,
    SessionStatus,
)
from pin_sessions.user_activity.errors import SessionAlreadyEnded
from pin_sessions.user_activity.events import session_ended, session_linked
from tests.conftest import T0, LogCapture
from tests.user_activity.conftest import UserFactory, device, outbox, sessions_of
from tests.user_activity.jobs.support import close_once

START = "/api/user-activity/sessions/start"
LINK = "/api/user-activity/sessions/link"
HEARTBEAT = "/api/user-activity/sessions/heartbeat"
SESSION, DEVICE, USER = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()


def _snapshot(status: SessionStatus, *, linked: bool = True) -> SessionSnapshot:
    return SessionSnapshot(
        id=SESSION,
        anonymous_id=DEVICE,
        user_id=USER if linked else None,
        linked_at=T0 + timedelta(minutes=1) if linked else None,
        signed_in_at=T0 if linked else None,
        status=status,
        created_at=T0,
        last_activity_at=T0 + timedelta(minutes=2),
    )


def test_a_sessions_operations_raise_its_domain_events() -> None:
    active = _snapshot(SessionStatus.ACTIVE)
    assert active.started() == SessionStarted(SESSION, DEVICE, USER)
    assert active.linked() == SessionLinked(SESSION, DEVICE, USER, T0 + timedelta(minutes=1))
    guest = _snapshot(SessionStatus.ACTIVE, linked=False)
    assert guest.started() == SessionStarted(SESSION, DEVICE, None)
    with pytest.raises(ValueError, match="unlinked"):
        guest.linked()
    ended = EndedSession(
        SESSION, DEVICE, None, T0, T0 + timedelta(seconds=95), timedelta(seconds=95)
    )
    assert ended.ended() == SessionEnded(SESSION, timedelta(seconds=95))


def test_the_integration_events_are_built_from_the_domain_events() -> None:
    linked = session_linked(_snapshot(SessionStatus.ACTIVE).linked())
    assert (linked.topic, linked.aggregate_id) == ("pin.user-activity.session-linked.v1", SESSION)
    assert linked.payload == {
        "SessionId": SESSION,
        "AnonymousId": DEVICE,
        "UserId": USER,
        "LinkedAt": T0 + timedelta(minutes=1),
    }
    ended = session_ended(
        EndedSession(SESSION, DEVICE, USER, T0, T0 + timedelta(seconds=95), timedelta(seconds=95))
    )
    assert ended.payload["DurationSeconds"] == 95


def test_an_inactive_session_refuses_any_change() -> None:
    _snapshot(SessionStatus.ACTIVE).ensure_active()
    with pytest.raises(SessionAlreadyEnded) as refused:
        _snapshot(SessionStatus.INACTIVE).ensure_active()
    assert (refused.value.code, refused.value.status) == (
        "USER_ACTIVITY_SESSION_ALREADY_ENDED",
        409,
    )


async def test_linking_a_session_that_ended_meanwhile_is_refused_and_changes_nothing(
    http: httpx.AsyncClient, runtime: Runtime, clock: FixedClock
) -> None:
    """The link statement is guarded by the status: an Inactive row is not linked."""
    anonymous_id = new_id()
    session_id = uuid.UUID(
        (await http.post(START, headers=device(anonymous_id))).json()["sessionId"]
    )
    clock.advance(timedelta(minutes=20))
    assert (await close_once(runtime, CollectorRegistry())).count("closed") == 1
    async with runtime.database.transaction() as conn:
        with pytest.raises(SessionAlreadyEnded):
            await repository.link_session(conn, session_id, DeviceLink(new_id(), T0), clock.now())
    [row] = await sessions_of(runtime, anonymous_id)
    assert (row["status"], row["user_id"], row["linked_at"]) == ("Inactive", None, None)


async def test_a_started_session_is_logged_with_its_ids_and_a_masked_address(
    http: httpx.AsyncClient, new_user: UserFactory, captured_logs: LogCapture
) -> None:
    guest_device, user_device = new_id(), new_id()
    user = await new_user()
    guest = (await http.post(START, headers=device(guest_device))).json()
    signed_in = (await http.post(START, headers=device(user_device, user))).json()
    lines = [json.loads(line) for line in captured_logs.lines()]
    ours = {guest["sessionId"], signed_in["sessionId"]}
    started = {
        line["sessionId"]: line
        for line in lines
        if line["event"] == "session started" and line["sessionId"] in ours
    }
    assert started[guest["sessionId"]]["anonymousId"] == str(guest_device)
    assert started[guest["sessionId"]]["userId"] is None
    assert started[signed_in["sessionId"]]["userId"] == str(user.user_id)
    assert started[signed_in["sessionId"]]["anonymousId"] == str(user_device)
    # The in-process client's address, masked to its /24 (IPv4), never whole.
    assert {line["clientIp"] for line in started.values()} == {"127.0.0.0/24"}
    assert all("127.0.0.1" not in json.dumps(line) for line in started.values())


def _rebuilt(linked: list[dict[str, Any]], ended: list[dict[str, Any]]) -> dict[str, Any]:
    """Each ended session's user and duration, from the two topics' payloads alone."""
    users = {event["SessionId"]: event["UserId"] for event in linked}
    return {
        event["SessionId"]: (users.get(event["SessionId"]), event["DurationSeconds"])
        for event in ended
    }


async def test_every_closed_sessions_user_and_duration_rebuild_from_the_events_alone(
    http: httpx.AsyncClient, runtime: Runtime, new_user: UserFactory, clock: FixedClock
) -> None:
    """A guest's session, one linked after its start, one switched by another user's link,
    a crawler's: closed by the closer or by a link, each rebuilt as the rows say."""
    guest, linked_later, switched = new_id(), new_id(), new_id()
    crawler = {"X-Anonymous-Id": str(new_id()), "User-Agent": "Googlebot/2.1"}
    first, second = await new_user(), await new_user()
    for headers in (device(guest), device(linked_later), device(switched, first), crawler):
        assert (await http.post(START, headers=headers)).status_code == 200
    clock.advance(timedelta(minutes=2))
    await http.post(LINK, headers=device(linked_later, first))
    await http.post(HEARTBEAT, headers=device(guest))
    clock.advance(timedelta(minutes=3))
    assert (await http.post(LINK, headers=device(switched, second))).json()["switched"] is True
    clock.advance(timedelta(minutes=20))
    await close_once(runtime, CollectorRegistry())

    async with runtime.database.connection() as conn:
        rows = await conn.fetch(
            "select id, user_id, duration, device_type from user_activity.sessions "
            "where status = 'Inactive'"
        )
    linked = [
        event["payload"] for event in await outbox(runtime, "pin.user-activity.session-linked")
    ]
    ended = [event["payload"] for event in await outbox(runtime, "pin.user-activity.session-ended")]
    expected = {
        str(row["id"]): (
            None if row["user_id"] is None else str(row["user_id"]),
            int(row["duration"].total_seconds()),
        )
        for row in rows
    }
    assert len(expected) == 5  # guest, linked later, switched away, its successor, crawler
    assert [row["device_type"] for row in rows].count("Bot") == 1
    assert _rebuilt(linked, ended) == expected

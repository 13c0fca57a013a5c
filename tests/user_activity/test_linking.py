"""INV-SES-002: link once; same user no-op; another user force-closes and starts anew.

Only linking changes who is on a device: a start, heartbeat, action or view with
a Bearer token is applied to the device's Active session as it is. The stale cases are in
``test_device_ownership``.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

import httpx

from pin_sessions.platform.clock import FixedClock
from pin_sessions.platform.ids import new_id
from pin_sessions.platform.runtime import Runtime
from pin_sessions.user_activity.linking import link_sign_in
from tests.conftest import T0
from tests.user_activity.conftest import UserFactory, device, outbox, sessions_of

START = "/api/user-activity/sessions/start"
LINK = "/api/user-activity/sessions/link"
ACTIONS = "/api/user-activity/actions"
VIEWS = "/api/user-activity/property-views"


async def test_linking_an_unlinked_session_sets_the_user_and_publishes(
    http: httpx.AsyncClient, runtime: Runtime, new_user: UserFactory, clock: FixedClock
) -> None:
    """linkedAt is the moment of linking, in the row, the answer and the event; the instant
    of the sign-in the link stands for (the token's auth_time) is kept as signed_in_at."""
    anonymous_id = new_id()
    started = (await http.post(START, headers=device(anonymous_id))).json()
    clock.advance(timedelta(seconds=3))
    user = await new_user()
    clock.advance(timedelta(seconds=5))
    response = await http.post(LINK, headers=device(anonymous_id, user))
    assert response.status_code == 200
    assert response.json() == {
        "sessionId": started["sessionId"],
        "userId": str(user.user_id),
        "linkedAt": "2026-11-29T12:00:08Z",
        "switched": False,
    }
    [row] = await sessions_of(runtime, anonymous_id)
    assert (row["user_id"], row["linked_at"]) == (user.user_id, T0 + timedelta(seconds=8))
    assert row["signed_in_at"] == T0 + timedelta(seconds=3)
    assert row["linked_at"] >= row["created_at"]
    [event] = await outbox(runtime, "pin.user-activity.session-linked")
    assert event["topic"] == "pin.user-activity.session-linked.v1"
    assert (event["version"], event["aggregate_type"]) == (1, "Session")
    assert event["aggregate_id"] == started["sessionId"]
    assert event["payload"] == {
        "SessionId": started["sessionId"],
        "AnonymousId": str(anonymous_id),
        "UserId": str(user.user_id),
        "LinkedAt": "2026-11-29T12:00:08+00:00",
    }


async def test_link_refuses_a_client_timestamp_and_changes_nothing(
    http: httpx.AsyncClient, runtime: Runtime, new_user: UserFactory
) -> None:
    """INV-SES-004: unknown body fields are refused (422), so a client clock never gets in."""
    anonymous_id = new_id()
    await http.post(START, headers=device(anonymous_id))
    user = await new_user()
    headers = device(anonymous_id, user)
    response = await http.post(LINK, headers=headers, json={"linkedAt": "2020-01-01T00:00:00Z"})
    assert (response.status_code, response.json()["code"]) == (422, "VALIDATION_ERROR")
    [row] = await sessions_of(runtime, anonymous_id)
    assert row["user_id"] is None
    assert (await http.post(LINK, headers=headers, json={})).status_code == 200


async def test_linking_the_same_user_again_changes_nothing(
    http: httpx.AsyncClient, runtime: Runtime, new_user: UserFactory, clock: FixedClock
) -> None:
    anonymous_id = new_id()
    user = await new_user()
    first = (await http.post(LINK, headers=device(anonymous_id, user))).json()
    clock.advance(timedelta(minutes=1))
    again = await http.post(LINK, headers=device(anonymous_id, user))
    assert again.json() == first
    [row] = await sessions_of(runtime, anonymous_id)
    assert row["linked_at"] == T0
    assert len(await outbox(runtime, "pin.user-activity.session-linked")) == 1


async def test_another_user_force_closes_the_session_and_gets_a_new_one(
    http: httpx.AsyncClient, runtime: Runtime, new_user: UserFactory, clock: FixedClock
) -> None:
    anonymous_id = new_id()
    first_user = await new_user()
    first = (await http.post(LINK, headers=device(anonymous_id, first_user))).json()
    clock.advance(timedelta(minutes=3))
    await http.post("/api/user-activity/sessions/heartbeat", headers=device(anonymous_id))
    clock.advance(timedelta(minutes=1))
    second_user = await new_user()
    response = await http.post(LINK, headers=device(anonymous_id, second_user))
    body = response.json()
    assert body["switched"] is True
    assert body["userId"] == str(second_user.user_id)
    assert body["sessionId"] != first["sessionId"]
    closed, current = await sessions_of(runtime, anonymous_id)
    assert (closed["status"], closed["user_id"]) == ("Inactive", first_user.user_id)
    assert closed["ended_at"] == T0 + timedelta(minutes=4)
    assert closed["duration"] == timedelta(minutes=3)
    assert (current["status"], current["user_id"]) == ("Active", second_user.user_id)
    assert current["device_os"] == closed["device_os"] == "iOS 18"
    [ended] = await outbox(runtime, "pin.user-activity.session-ended")
    assert ended["payload"] == {
        "SessionId": first["sessionId"],
        "AnonymousId": str(anonymous_id),
        "UserId": str(first_user.user_id),
        "CreatedAt": "2026-11-29T12:00:00+00:00",
        "LastActivityAt": "2026-11-29T12:03:00+00:00",
        "DurationSeconds": 180,
    }
    linked = await outbox(runtime, "pin.user-activity.session-linked")
    assert [event["payload"]["SessionId"] for event in linked] == [
        first["sessionId"],
        body["sessionId"],
    ]


async def test_two_users_linking_one_device_at_once_leave_one_consistent_session(
    http: httpx.AsyncClient, runtime: Runtime, new_user: UserFactory
) -> None:
    anonymous_id = new_id()
    await http.post(START, headers=device(anonymous_id))
    users = [await new_user() for _ in range(2)]
    responses = await asyncio.gather(
        *(http.post(LINK, headers=device(anonymous_id, user)) for user in users for _ in range(5))
    )
    assert {response.status_code for response in responses} == {200}
    rows = await sessions_of(runtime, anonymous_id)
    active = [row for row in rows if row["status"] == "Active"]
    assert len(active) == 1
    closed = [row for row in rows if row["status"] == "Inactive"]
    ended = await outbox(runtime, "pin.user-activity.session-ended")
    # Every closed session ended exactly once; every session's link was published once.
    assert sorted(event["payload"]["SessionId"] for event in ended) == sorted(
        str(row["id"]) for row in closed
    )
    linked = await outbox(runtime, "pin.user-activity.session-linked")
    assert sorted(event["payload"]["SessionId"] for event in linked) == sorted(
        str(row["id"]) for row in rows
    )
    for row in rows:
        assert row["user_id"] in {user.user_id for user in users}


async def test_children_keep_their_user_snapshot_after_the_link(
    http: httpx.AsyncClient, runtime: Runtime, new_user: UserFactory
) -> None:
    anonymous_id = new_id()
    user = await new_user()
    await http.post(ACTIONS, headers=device(anonymous_id), json={"type": "before"})
    await http.post(LINK, headers=device(anonymous_id, user))
    await http.post(ACTIONS, headers=device(anonymous_id), json={"type": "after"})
    async with runtime.database.connection() as conn:
        rows = await conn.fetch(
            "select type, user_id from user_activity.action_events order by created_at, id"
        )
    assert [(row["type"], row["user_id"]) for row in rows] == [
        ("before", None),
        ("after", user.user_id),
    ]


async def test_link_runs_without_http_in_the_callers_transaction(
    runtime: Runtime, http: httpx.AsyncClient
) -> None:
    """The sign-ins consumer calls the operation with (anonymous_id, user_id, SignedInAt, now)."""
    anonymous_id, user_id = new_id(), new_id()
    started = (await http.post(START, headers=device(anonymous_id))).json()
    async with runtime.database.transaction() as conn:
        outcome = await link_sign_in(conn, anonymous_id, user_id, T0, T0)
    assert outcome is not None
    assert str(outcome.session.id) == started["sessionId"]
    assert outcome.session.user_id == user_id
    async with runtime.database.transaction() as conn:
        assert await link_sign_in(conn, new_id(), user_id, T0, T0) is None
    assert all(row["user_id"] == user_id for row in await sessions_of(runtime, anonymous_id))


async def test_a_signed_in_start_links_the_new_session(
    http: httpx.AsyncClient, runtime: Runtime, new_user: UserFactory
) -> None:
    anonymous_id = new_id()
    user = await new_user()
    body = (await http.post(START, headers=device(anonymous_id, user))).json()
    assert body["userId"] == str(user.user_id)
    [event] = await outbox(runtime, "pin.user-activity.session-linked")
    assert event["payload"]["SessionId"] == body["sessionId"]


async def test_link_needs_a_user_and_a_device(
    http: httpx.AsyncClient, new_user: UserFactory
) -> None:
    assert (await http.post(LINK, headers=device(new_id()))).status_code == 401
    user = await new_user()
    response = await http.post(LINK, headers=user.headers)
    assert response.status_code == 400
    assert response.json()["code"] == "USER_ACTIVITY_ANONYMOUS_ID_REQUIRED"


async def test_a_switch_without_http_keeps_the_device_of_the_closed_session(
    runtime: Runtime, http: httpx.AsyncClient, new_user: UserFactory
) -> None:
    anonymous_id = new_id()
    first_user = await new_user()
    await http.post(LINK, headers=device(anonymous_id, first_user))
    second_user_id = new_id()
    async with runtime.database.transaction() as conn:
        outcome = await link_sign_in(conn, anonymous_id, second_user_id, T0, T0)
    assert outcome is not None
    assert outcome.switched is True
    closed, current = await sessions_of(runtime, anonymous_id)
    assert (closed["status"], current["user_id"]) == ("Inactive", second_user_id)
    assert (current["device_type"], current["device_os"], current["device_ip"]) == (
        closed["device_type"],
        closed["device_os"],
        closed["device_ip"],
    )


async def test_a_signed_in_heartbeat_that_restarts_links_the_new_session(
    http: httpx.AsyncClient, runtime: Runtime, new_user: UserFactory
) -> None:
    anonymous_id = new_id()
    user = await new_user()
    response = await http.post(
        "/api/user-activity/sessions/heartbeat", headers=device(anonymous_id, user)
    )
    assert response.json()["restarted"] is True
    [row] = await sessions_of(runtime, anonymous_id)
    assert row["user_id"] == user.user_id
    [event] = await outbox(runtime, "pin.user-activity.session-linked")
    assert event["payload"]["SessionId"] == response.json()["sessionId"]


async def test_an_action_with_another_users_token_is_recorded_in_the_devices_session(
    http: httpx.AsyncClient, runtime: Runtime, new_user: UserFactory, clock: FixedClock
) -> None:
    """SPEC §11: an action never switches the device, however fresh its token."""
    anonymous_id = new_id()
    first_user = await new_user()
    first = (await http.post(START, headers=device(anonymous_id, first_user))).json()
    clock.advance(timedelta(minutes=2))
    second_user = await new_user()
    response = await http.post(
        ACTIONS, headers=device(anonymous_id, second_user), json={"type": "search"}
    )
    assert response.status_code == 201, response.text
    assert response.json()["sessionId"] == first["sessionId"]
    [row] = await sessions_of(runtime, anonymous_id)
    assert (row["status"], row["user_id"]) == ("Active", first_user.user_id)
    assert row["last_activity_at"] == T0 + timedelta(minutes=2)
    async with runtime.database.connection() as conn:
        [action] = await conn.fetch("select session_id, user_id from user_activity.action_events")
    # The child's snapshot is its session's user, as for every child (SPEC §5).
    assert (action["session_id"], action["user_id"]) == (row["id"], first_user.user_id)
    assert await outbox(runtime, "pin.user-activity.session-ended") == []


async def test_a_property_view_with_another_users_token_is_recorded_in_the_devices_session(
    http: httpx.AsyncClient, runtime: Runtime, new_user: UserFactory, clock: FixedClock
) -> None:
    anonymous_id = new_id()
    first_user = await new_user()
    first = (await http.post(START, headers=device(anonymous_id, first_user))).json()
    clock.advance(timedelta(minutes=2))
    second_user = await new_user()
    response = await http.post(
        VIEWS, headers=device(anonymous_id, second_user), json={"propertyObjectId": str(new_id())}
    )
    assert response.status_code == 201, response.text
    assert response.json()["sessionId"] == first["sessionId"]
    [row] = await sessions_of(runtime, anonymous_id)
    assert (row["status"], row["user_id"]) == ("Active", first_user.user_id)
    assert await outbox(runtime, "pin.user-activity.session-ended") == []


async def test_an_action_with_a_token_leaves_the_devices_unlinked_session_a_guests(
    http: httpx.AsyncClient, runtime: Runtime, new_user: UserFactory
) -> None:
    """Linking is the link route's and the sign-ins consumer's (seed 003, SPEC §11)."""
    anonymous_id = new_id()
    started = (await http.post(START, headers=device(anonymous_id))).json()
    user = await new_user()
    response = await http.post(ACTIONS, headers=device(anonymous_id, user), json={"type": "x"})
    assert response.json()["sessionId"] == started["sessionId"]
    [row] = await sessions_of(runtime, anonymous_id)
    assert (row["status"], row["user_id"]) == ("Active", None)
    async with runtime.database.connection() as conn:
        assert await conn.fetchval("select user_id from user_activity.action_events") is None
    assert await outbox(runtime, "pin.user-activity.session-linked") == []
    # The link that follows a sign-in makes the session, and so the action, the user's.
    linked = (await http.post(LINK, headers=device(anonymous_id, user))).json()
    assert (linked["sessionId"], linked["userId"]) == (started["sessionId"], str(user.user_id))

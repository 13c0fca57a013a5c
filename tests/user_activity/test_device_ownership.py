"""SPEC §11 "The latest sign-in owns the device": a stale tab never takes a device back.

Device X: user A signed in and linked it, then B signed in on X and linked it. A's tab still
holds a valid access token (refreshes keep its ``auth_time``, A's sign-in). Whatever that
tab sends — an action, a view, a start, a heartbeat, a link — X stays B's: requests are
applied to the device's Active session as it is, a session one of them must start is a
guest's, and A's link changes nothing. Real ES256 tokens, the real API in process, the real
database; the closer is the real job.
"""

from __future__ import annotations

import asyncio
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
from tests.conftest import T0, LogCapture
from tests.support.tokens import Tokens
from tests.support.users import SignedInUser, signed_in_user
from tests.support.waiting import wait_until
from tests.user_activity.conftest import UserFactory, device, outbox, sessions_of
from tests.user_activity.jobs.support import close_once

START = "/api/user-activity/sessions/start"
HEARTBEAT = "/api/user-activity/sessions/heartbeat"
LINK = "/api/user-activity/sessions/link"
ACTIONS = "/api/user-activity/actions"
VIEWS = "/api/user-activity/property-views"
MINUTE = timedelta(minutes=1)
B_SIGNS_IN = T0 + MINUTE
STALE_LINKS = "user_activity_stale_links_total"
ENDED = "pin.user-activity.session-ended"
LINKED = "pin.user-activity.session-linked"


@pytest.fixture
def settings_env(settings_env: dict[str, str]) -> dict[str, str]:
    """Links wait on a held row lock in one test: longer than the API's 5 s on a busy machine."""
    return {**settings_env, "PIN_DATABASE__STATEMENT_TIMEOUT": "60"}


class Device:
    """Device X of the module docstring: A signed in and linked at T0, B at T0 + 1 min."""

    def __init__(self, anonymous_id: uuid.UUID, a: SignedInUser, b: SignedInUser) -> None:
        self.anonymous_id = anonymous_id
        self.a = a
        self.b = b
        self.a_session: uuid.UUID
        self.b_session: uuid.UUID

    def headers(self, user: SignedInUser | None = None, token: str | None = None) -> dict[str, str]:
        headers = device(self.anonymous_id, user)
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        return headers


@pytest.fixture
async def taken_over(http: httpx.AsyncClient, new_user: UserFactory, clock: FixedClock) -> Device:
    anonymous_id = new_id()
    a = await new_user()
    await http.post(START, headers=device(anonymous_id))
    a_link = (await http.post(LINK, headers=device(anonymous_id, a))).json()
    clock.set(B_SIGNS_IN)
    b = await new_user()
    b_link = (await http.post(LINK, headers=device(anonymous_id, b))).json()
    assert (b_link["switched"], b_link["userId"]) == (True, str(b.user_id))
    x = Device(anonymous_id, a, b)
    x.a_session, x.b_session = uuid.UUID(a_link["sessionId"]), uuid.UUID(b_link["sessionId"])
    return x


async def _a_refreshed_token(runtime: Runtime, x: Device, clock: FixedClock) -> str:
    """A's tab refreshed its token just now: new iat, A's sign-in kept as auth_time."""
    return await Tokens.of(runtime).access(
        x.a.user_id, x.a.session_id, now=clock.now(), auth_time=T0
    )


async def _close_idle_sessions(runtime: Runtime, clock: FixedClock) -> None:
    """Past the inactivity threshold the closer ends B's session: the device has none."""
    clock.advance(16 * MINUTE)
    assert (await close_once(runtime, CollectorRegistry())).count("closed") == 1


async def _is_b_s_as_before(runtime: Runtime, x: Device) -> dict[str, Any]:
    closed, current = await sessions_of(runtime, x.anonymous_id)
    assert (closed["id"], closed["status"], closed["user_id"]) == (
        x.a_session,
        "Inactive",
        x.a.user_id,
    )
    assert (current["id"], current["status"], current["user_id"]) == (
        x.b_session,
        "Active",
        x.b.user_id,
    )
    assert current["signed_in_at"] == B_SIGNS_IN
    [ended] = await outbox(runtime, ENDED)
    assert ended["payload"]["SessionId"] == str(x.a_session)
    assert len(await outbox(runtime, LINKED)) == 2
    return current


async def test_an_action_with_a_stale_token_is_recorded_in_the_later_users_session(
    http: httpx.AsyncClient, runtime: Runtime, clock: FixedClock, taken_over: Device
) -> None:
    x = taken_over
    clock.advance(MINUTE)
    response = await http.post(ACTIONS, headers=x.headers(x.a), json={"type": "search"})
    assert response.status_code == 201, response.text
    assert response.json()["sessionId"] == str(x.b_session)
    current = await _is_b_s_as_before(runtime, x)
    assert current["last_activity_at"] == clock.now()  # an action is activity
    async with runtime.database.connection() as conn:
        [action] = await conn.fetch("select session_id, user_id from user_activity.action_events")
    assert (action["session_id"], action["user_id"]) == (x.b_session, x.b.user_id)


async def test_a_property_view_with_a_stale_token_is_recorded_in_the_later_users_session(
    http: httpx.AsyncClient, runtime: Runtime, clock: FixedClock, taken_over: Device
) -> None:
    x = taken_over
    clock.advance(MINUTE)
    body = {"propertyObjectId": str(new_id())}
    response = await http.post(VIEWS, headers=x.headers(x.a), json=body)
    assert response.status_code == 201, response.text
    assert response.json()["sessionId"] == str(x.b_session)
    await _is_b_s_as_before(runtime, x)


async def test_a_start_with_a_stale_token_is_a_heartbeat_of_the_later_users_session(
    http: httpx.AsyncClient, runtime: Runtime, clock: FixedClock, taken_over: Device
) -> None:
    x = taken_over
    clock.advance(MINUTE)
    response = await http.post(START, headers=x.headers(x.a))
    assert response.status_code == 200, response.text
    started = response.json()
    assert (started["sessionId"], started["created"]) == (str(x.b_session), False)
    current = await _is_b_s_as_before(runtime, x)
    assert current["last_activity_at"] == clock.now()


async def test_a_heartbeat_with_a_stale_token_that_must_restart_starts_a_guest_session(
    http: httpx.AsyncClient,
    runtime: Runtime,
    clock: FixedClock,
    taken_over: Device,
    captured_logs: LogCapture,
) -> None:
    x = taken_over
    await _close_idle_sessions(runtime, clock)
    token = await _a_refreshed_token(runtime, x, clock)
    response = await http.post(HEARTBEAT, headers=x.headers(token=token))
    assert response.status_code == 200, response.text
    assert response.json()["restarted"] is True
    *_, restarted = await sessions_of(runtime, x.anonymous_id)
    assert str(restarted["id"]) == response.json()["sessionId"]
    assert (restarted["status"], restarted["user_id"], restarted["linked_at"]) == (
        "Active",
        None,
        None,
    )
    assert len(await outbox(runtime, LINKED)) == 2  # nothing linked to A
    [line] = [json.loads(line) for line in captured_logs.lines() if "stale token" in line]
    assert (line["sessionId"], line["userId"]) == (str(restarted["id"]), str(x.a.user_id))


async def test_a_start_with_a_stale_token_on_a_device_without_a_session_starts_a_guests(
    http: httpx.AsyncClient, runtime: Runtime, clock: FixedClock, taken_over: Device
) -> None:
    x = taken_over
    await _close_idle_sessions(runtime, clock)
    token = await _a_refreshed_token(runtime, x, clock)
    started = (await http.post(START, headers=x.headers(token=token))).json()
    assert (started["created"], started["userId"]) == (True, None)


async def test_a_stale_link_changes_nothing_and_answers_the_devices_session_as_it_is(
    http: httpx.AsyncClient,
    runtime: Runtime,
    clock: FixedClock,
    taken_over: Device,
    captured_logs: LogCapture,
) -> None:
    x = taken_over
    clock.advance(MINUTE)
    response = await http.post(LINK, headers=x.headers(x.a))
    assert response.status_code == 200, response.text
    assert response.json() == {
        "sessionId": str(x.b_session),
        "userId": str(x.b.user_id),
        "linkedAt": "2026-11-29T12:01:00Z",
        "switched": False,
        "stale": True,
    }
    await _is_b_s_as_before(runtime, x)
    assert runtime.registry.get_sample_value(STALE_LINKS) == 1
    [line] = [json.loads(line) for line in captured_logs.lines() if "stale link" in line]
    assert line["event"] == "stale link ignored"
    assert (line["sessionId"], line["userId"]) == (str(x.b_session), str(x.a.user_id))
    assert str(x.anonymous_id) not in json.dumps(line)


async def test_a_stale_link_on_a_device_without_a_session_starts_a_guests(
    http: httpx.AsyncClient, runtime: Runtime, clock: FixedClock, taken_over: Device
) -> None:
    x = taken_over
    await _close_idle_sessions(runtime, clock)
    token = await _a_refreshed_token(runtime, x, clock)
    answer = (await http.post(LINK, headers=x.headers(token=token))).json()
    assert (answer["userId"], answer["linkedAt"], answer["stale"]) == (None, None, True)
    *_, started = await sessions_of(runtime, x.anonymous_id)
    assert (str(started["id"]), started["user_id"]) == (answer["sessionId"], None)
    assert runtime.registry.get_sample_value(STALE_LINKS) == 1


async def test_on_a_guests_session_the_devices_history_judges_a_link(
    http: httpx.AsyncClient, runtime: Runtime, clock: FixedClock, taken_over: Device
) -> None:
    """The guest session A's tab restarted says nothing of who signed in last; the device's
    links do: A's is still stale there, B's (a refreshed token of B) links it."""
    x = taken_over
    await _close_idle_sessions(runtime, clock)
    a_token = await _a_refreshed_token(runtime, x, clock)
    guest = (await http.post(HEARTBEAT, headers=x.headers(token=a_token))).json()["sessionId"]
    a_link = (await http.post(LINK, headers=x.headers(token=a_token))).json()
    assert (a_link["sessionId"], a_link["userId"], a_link["stale"]) == (guest, None, True)
    b_token = await Tokens.of(runtime).access(
        x.b.user_id, x.b.session_id, now=clock.now(), auth_time=B_SIGNS_IN
    )
    b_link = (await http.post(LINK, headers=x.headers(token=b_token))).json()
    assert b_link == {
        "sessionId": guest,
        "userId": str(x.b.user_id),
        "linkedAt": "2026-11-29T12:17:00Z",  # linked now, for B's sign-in at 12:01
        "switched": False,
    }
    *_, current = await sessions_of(runtime, x.anonymous_id)
    assert (current["linked_at"], current["signed_in_at"]) == (clock.now(), B_SIGNS_IN)


async def test_a_new_sign_in_of_the_earlier_user_takes_the_device_back(
    http: httpx.AsyncClient, runtime: Runtime, clock: FixedClock, taken_over: Device
) -> None:
    """A fresh token's paths are unchanged: A signing in again is the latest sign-in."""
    x = taken_over
    clock.advance(MINUTE)
    async with runtime.database.transaction() as conn:
        again = await signed_in_user(
            conn, Tokens.of(runtime).signer, now=clock.now(), user_id=x.a.user_id
        )
    response = await http.post(LINK, headers=x.headers(again))
    answer = response.json()
    assert (answer["switched"], answer["userId"]) == (True, str(x.a.user_id))
    assert answer["linkedAt"] == "2026-11-29T12:02:00Z"
    assert "stale" not in answer
    # A's old tab is A's again: its restart is a session of A, at A's latest sign-in.
    await _close_idle_sessions(runtime, clock)
    old_tab = await _a_refreshed_token(runtime, x, clock)
    restarted = await http.post(HEARTBEAT, headers=x.headers(token=old_tab))
    *_, current = await sessions_of(runtime, x.anonymous_id)
    assert str(current["id"]) == restarted.json()["sessionId"]
    assert (current["user_id"], current["signed_in_at"]) == (x.a.user_id, T0 + 2 * MINUTE)
    assert current["linked_at"] == current["created_at"] == clock.now()
    assert runtime.registry.get_sample_value(STALE_LINKS) == 0


async def test_fresh_tokens_start_and_restart_their_users_sessions(
    http: httpx.AsyncClient, runtime: Runtime, new_user: UserFactory, clock: FixedClock
) -> None:
    user = await new_user()
    anonymous_id = new_id()
    clock.advance(MINUTE)
    started = (await http.post(START, headers=device(anonymous_id, user))).json()
    assert (started["created"], started["userId"]) == (True, str(user.user_id))
    clock.advance(16 * MINUTE)
    await close_once(runtime, CollectorRegistry())
    token = await Tokens.of(runtime).access(
        user.user_id, user.session_id, now=clock.now(), auth_time=T0
    )
    restarted = await http.post(
        HEARTBEAT, headers=device(anonymous_id) | {"Authorization": f"Bearer {token}"}
    )
    assert restarted.json()["restarted"] is True
    first, second = await sessions_of(runtime, anonymous_id)
    assert (first["user_id"], second["user_id"]) == (user.user_id, user.user_id)
    # Each linked when it started, both for the sign-in at T0: the key later links are
    # ordered by.
    assert first["signed_in_at"] == second["signed_in_at"] == T0
    assert (first["linked_at"], second["linked_at"]) == (T0 + MINUTE, clock.now())
    assert [event["payload"]["SessionId"] for event in await outbox(runtime, LINKED)] == [
        str(first["id"]),
        str(second["id"]),
    ]


async def test_a_token_without_auth_time_is_judged_by_when_it_was_issued(
    http: httpx.AsyncClient, runtime: Runtime, clock: FixedClock, taken_over: Device
) -> None:
    """Tokens minted before the claim existed (valid 15 minutes more): the sign-in came no
    later than their iat. Issued before B's link, A's is stale; issued after, it passes."""
    x = taken_over
    tokens = Tokens.of(runtime)
    clock.advance(MINUTE)
    before_b = await tokens.without_auth_time(x.a.user_id, x.a.session_id, now=T0)
    stale = (await http.post(LINK, headers=x.headers(token=before_b))).json()
    assert (stale["sessionId"], stale["stale"]) == (str(x.b_session), True)
    after_b = await tokens.without_auth_time(x.a.user_id, x.a.session_id, now=clock.now())
    passed = (await http.post(LINK, headers=x.headers(token=after_b))).json()
    assert (passed["switched"], passed["userId"]) == (True, str(x.a.user_id))


COUNT_LOCK_WAITERS = """
select count(*) from pg_stat_activity
where datname = current_database() and wait_event_type = 'Lock'
"""


async def test_racing_links_leave_the_device_to_the_latest_sign_in_whatever_their_order(
    http: httpx.AsyncClient, runtime: Runtime, new_user: UserFactory, clock: FixedClock
) -> None:
    """A's and B's links queue on the device's session row, held meanwhile, and are let in
    together in whatever order PostgreSQL grants the lock: once B's link has committed, no
    link of A changes anything, so the device ends B's and is never A's after B's."""
    anonymous_id = new_id()
    a = await new_user()
    clock.advance(MINUTE)
    b = await new_user()
    guest = (await http.post(START, headers=device(anonymous_id))).json()
    async with runtime.database.transaction() as conn:
        await conn.execute(
            "select 1 from user_activity.sessions where id = $1 for update",
            uuid.UUID(guest["sessionId"]),
        )
        links = [
            asyncio.create_task(http.post(LINK, headers=device(anonymous_id, user)))
            for _ in range(4)
            for user in (a, b)
        ]

        async def all_waiting() -> bool:
            async with runtime.database.connection() as probe:
                waiting: int = await probe.fetchval(COUNT_LOCK_WAITERS)
            return waiting >= len(links)

        await wait_until(all_waiting, timeout=60, interval=0.02)
    responses = [await link for link in links]
    assert {response.status_code for response in responses} == {200}
    answers = [response.json() for response in responses]
    rows = await sessions_of(runtime, anonymous_id)
    owners = [row["user_id"] for row in rows]
    assert owners[-1] == b.user_id and rows[-1]["status"] == "Active"
    first_b = owners.index(b.user_id)
    assert a.user_id not in owners[first_b:]
    a_answers = [answer for answer in answers if answer.get("stale")]
    assert all(answer["userId"] == str(b.user_id) for answer in a_answers)
    assert runtime.registry.get_sample_value(STALE_LINKS) == len(a_answers)

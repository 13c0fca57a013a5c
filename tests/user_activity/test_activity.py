"""Actions and property views: bounded input, activity, idempotent end on the same device."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

import httpx
import pytest

from pin_sessions.platform.clock import FixedClock
from pin_sessions.platform.ids import new_id
from pin_sessions.platform.runtime import Runtime
from tests.conftest import T0
from tests.user_activity.conftest import device, outbox, sessions_of

START = "/api/user-activity/sessions/start"
ACTIONS = "/api/user-activity/actions"
VIEWS = "/api/user-activity/property-views"


async def test_an_action_is_recorded_and_counts_as_activity(
    http: httpx.AsyncClient, runtime: Runtime, clock: FixedClock
) -> None:
    anonymous_id = new_id()
    started = (await http.post(START, headers=device(anonymous_id))).json()
    clock.advance(timedelta(minutes=2))
    property_object_id = new_id()
    response = await http.post(
        ACTIONS,
        headers=device(anonymous_id),
        json={
            "type": "favorites.add-1_x",
            "propertyObjectId": str(property_object_id),
            "data": {"k": [1, 2]},
        },
    )
    assert response.status_code == 201
    assert response.json()["sessionId"] == started["sessionId"]
    [session] = await sessions_of(runtime, anonymous_id)
    assert session["last_activity_at"] == T0 + timedelta(minutes=2)
    async with runtime.database.connection() as conn:
        action = await conn.fetchrow("select * from user_activity.action_events")
    assert action is not None
    assert str(action["id"]) == response.json()["actionId"]
    assert (action["type"], action["property_object_id"], action["data"]) == (
        "favorites.add-1_x",
        property_object_id,
        {"k": [1, 2]},
    )


@pytest.mark.parametrize(
    "body",
    [
        {"type": "Upper"},
        {"type": "a" * 65},
        {"type": "space here"},
        {"type": ""},
        {"type": "ok", "data": "x" * (8 * 1024)},
        {"type": "ok", "createdAt": "2020-01-01T00:00:00Z"},
        {"type": "ok", "sessionId": str(uuid.uuid4())},
        # jsonb cannot store U+0000, in a value or in a key
        {"type": "ok", "data": {"note": "a\u0000b"}},
        {"type": "ok", "data": [{"a\u0000": 1}]},
    ],
)
async def test_an_invalid_action_is_rejected(
    http: httpx.AsyncClient, runtime: Runtime, body: dict[str, object]
) -> None:
    anonymous_id = new_id()
    response = await http.post(ACTIONS, headers=device(anonymous_id), json=body)
    assert response.status_code == 422
    assert await sessions_of(runtime, anonymous_id) == []


async def test_action_data_of_exactly_8_kib_is_accepted(http: httpx.AsyncClient) -> None:
    data = "x" * (8 * 1024 - 2)  # with its quotes, 8192 bytes of JSON
    response = await http.post(ACTIONS, headers=device(new_id()), json={"type": "ok", "data": data})
    assert response.status_code == 201


async def test_an_action_on_a_closed_session_restarts_one(
    http: httpx.AsyncClient, runtime: Runtime
) -> None:
    anonymous_id = new_id()
    first = (await http.post(START, headers=device(anonymous_id))).json()
    async with runtime.database.connection() as conn:
        await conn.execute(
            "update user_activity.sessions set status = 'Inactive', ended_at = $1, "
            "duration = interval '0'",
            T0,
        )
    response = await http.post(ACTIONS, headers=device(anonymous_id), json={"type": "ok"})
    assert response.json()["sessionId"] != first["sessionId"]


async def test_ending_a_view_is_idempotent(
    http: httpx.AsyncClient, runtime: Runtime, clock: FixedClock
) -> None:
    anonymous_id = new_id()
    view = (
        await http.post(
            VIEWS, headers=device(anonymous_id), json={"propertyObjectId": str(new_id())}
        )
    ).json()
    assert view["startedAt"] == "2026-11-29T12:00:00Z"
    clock.advance(timedelta(seconds=42))
    end = f"{VIEWS}/{view['viewId']}/end"
    responses = await asyncio.gather(
        *(http.post(end, headers=device(anonymous_id)) for _ in range(5))
    )
    assert {response.status_code for response in responses} == {200}
    assert {response.json()["durationSeconds"] for response in responses} == {42}
    clock.advance(timedelta(minutes=5))
    again = await http.post(end, headers=device(anonymous_id))
    assert again.json() == {"viewId": view["viewId"], "durationSeconds": 42}
    [event] = await outbox(runtime, "pin.user-activity.property-object-view-ended")
    assert event["payload"]["DurationSeconds"] == 42


async def test_ending_a_view_refuses_a_client_timestamp(
    http: httpx.AsyncClient, runtime: Runtime, clock: FixedClock
) -> None:
    """INV-SES-004: the server's clock ends the view; unknown body fields are a 422."""
    anonymous_id = new_id()
    view = (
        await http.post(
            VIEWS, headers=device(anonymous_id), json={"propertyObjectId": str(new_id())}
        )
    ).json()
    clock.advance(timedelta(seconds=42))
    end = f"{VIEWS}/{view['viewId']}/end"
    refused = await http.post(end, headers=device(anonymous_id), json={"endedAt": "2030-01-01"})
    assert (refused.status_code, refused.json()["code"]) == (422, "VALIDATION_ERROR")
    assert await outbox(runtime, "pin.user-activity.property-object-view-ended") == []
    ended = await http.post(end, headers=device(anonymous_id), json={})
    assert ended.json() == {"viewId": view["viewId"], "durationSeconds": 42}


async def test_a_view_is_ended_only_from_its_own_device(http: httpx.AsyncClient) -> None:
    owner = new_id()
    view = (
        await http.post(VIEWS, headers=device(owner), json={"propertyObjectId": str(new_id())})
    ).json()
    stranger = await http.post(f"{VIEWS}/{view['viewId']}/end", headers=device(new_id()))
    assert stranger.status_code == 404
    assert stranger.json()["code"] == "USER_ACTIVITY_VIEW_NOT_FOUND"
    unknown = await http.post(f"{VIEWS}/{new_id()}/end", headers=device(owner))
    assert unknown.status_code == 404
    mine = await http.post(f"{VIEWS}/{view['viewId']}/end", headers=device(owner))
    assert mine.status_code == 200


async def test_activity_routes_need_a_device(http: httpx.AsyncClient) -> None:
    for path, body in [(ACTIONS, {"type": "ok"}), (VIEWS, {"propertyObjectId": str(new_id())})]:
        response = await http.post(path, json=body)
        assert response.status_code == 400
        assert response.json()["code"] == "USER_ACTIVITY_ANONYMOUS_ID_REQUIRED"

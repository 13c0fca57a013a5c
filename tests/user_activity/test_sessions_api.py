"""Start and heartbeat over real HTTP: INV-SES-001, -003, -004, -006."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

import httpx
import pytest

from pin_sessions.platform.clock import FixedClock
from pin_sessions.platform.ids import new_id
from pin_sessions.platform.runtime import Runtime
from tests.conftest import T0, LogCapture
from tests.support.waiting import wait_until
from tests.user_activity.conftest import UserFactory, device, sessions_of

START = "/api/user-activity/sessions/start"
HEARTBEAT = "/api/user-activity/sessions/heartbeat"


async def test_start_without_a_device_issues_an_anonymous_id_and_a_session(
    http: httpx.AsyncClient, runtime: Runtime
) -> None:
    response = await http.post(
        START, headers={"User-Agent": "Mozilla/5.0 (iPhone; CPU iPhone OS 18_0 like Mac OS X)"}
    )
    assert response.status_code == 200
    body = response.json()
    assert body["created"] is True
    assert body["status"] == "Active"
    assert body["userId"] is None
    assert body["createdAt"] == body["lastActivityAt"] == "2026-11-29T12:00:00Z"
    [row] = await sessions_of(runtime, uuid.UUID(body["anonymousId"]))
    assert row["id"] == uuid.UUID(body["sessionId"])
    assert row["id"].version == 7
    assert row["device_type"] == "Mobile"


async def test_start_with_an_active_session_heartbeats_it(
    http: httpx.AsyncClient, clock: FixedClock
) -> None:
    first = (await http.post(START)).json()
    clock.advance(timedelta(seconds=30))
    again = await http.post(START, headers={"X-Anonymous-Id": first["anonymousId"]})
    body = again.json()
    assert body["sessionId"] == first["sessionId"]
    assert body["created"] is False
    assert body["lastActivityAt"] == "2026-11-29T12:00:30Z"


async def test_fifty_parallel_starts_of_one_device_share_one_active_session(
    http: httpx.AsyncClient, runtime: Runtime
) -> None:
    """INV-SES-001: the partial unique index never surfaces as a 500."""
    anonymous_id = new_id()
    responses = await asyncio.gather(
        *(http.post(START, headers=device(anonymous_id)) for _ in range(50))
    )
    assert {response.status_code for response in responses} == {200}
    session_ids = {response.json()["sessionId"] for response in responses}
    rows = await sessions_of(runtime, anonymous_id)
    assert [row["status"] for row in rows] == ["Active"]
    assert session_ids == {str(rows[0]["id"])}
    assert sum(response.json()["created"] for response in responses) == 1


async def test_heartbeat_extends_the_active_session(
    http: httpx.AsyncClient, clock: FixedClock, runtime: Runtime
) -> None:
    started = (await http.post(START)).json()
    clock.advance(timedelta(minutes=1))
    response = await http.post(HEARTBEAT, headers={"X-Anonymous-Id": started["anonymousId"]})
    assert response.status_code == 200
    assert response.json() == {
        "sessionId": started["sessionId"],
        "lastActivityAt": "2026-11-29T12:01:00Z",
        "restarted": False,
    }
    [row] = await sessions_of(runtime, uuid.UUID(started["anonymousId"]))
    assert row["last_activity_at"] == T0 + timedelta(minutes=1)


async def test_heartbeat_without_an_active_session_starts_a_new_one(
    http: httpx.AsyncClient, runtime: Runtime
) -> None:
    """INV-SES-003: the device came back after its session closed."""
    anonymous_id = new_id()
    response = await http.post(HEARTBEAT, headers=device(anonymous_id))
    assert response.status_code == 200
    assert response.json()["restarted"] is True
    [row] = await sessions_of(runtime, anonymous_id)
    assert str(row["id"]) == response.json()["sessionId"]
    assert row["device_os"] == "iOS 18"


async def test_heartbeat_never_changes_an_inactive_session(
    http: httpx.AsyncClient, runtime: Runtime, clock: FixedClock
) -> None:
    """INV-SES-006: a closed session is immutable; the heartbeat restarts instead."""
    anonymous_id = new_id()
    await http.post(START, headers=device(anonymous_id))
    async with runtime.database.connection() as conn:
        await conn.execute(
            "update user_activity.sessions set status = 'Inactive', ended_at = $2, "
            "duration = interval '0' where anonymous_id = $1",
            anonymous_id,
            T0,
        )
    [closed_before] = await sessions_of(runtime, anonymous_id)
    clock.advance(timedelta(minutes=20))
    response = await http.post(HEARTBEAT, headers=device(anonymous_id))
    assert response.json()["restarted"] is True
    closed_after, restarted = await sessions_of(runtime, anonymous_id)
    assert closed_after == closed_before
    assert restarted["status"] == "Active"
    assert restarted["created_at"] == T0 + timedelta(minutes=20)


async def test_parallel_heartbeats_after_a_close_restart_exactly_one_session(
    http: httpx.AsyncClient, runtime: Runtime
) -> None:
    anonymous_id = new_id()
    responses = await asyncio.gather(
        *(http.post(HEARTBEAT, headers=device(anonymous_id)) for _ in range(20))
    )
    assert {response.status_code for response in responses} == {200}
    assert len({response.json()["sessionId"] for response in responses}) == 1
    assert sum(response.json()["restarted"] for response in responses) == 1
    assert len(await sessions_of(runtime, anonymous_id)) == 1


async def test_heartbeat_without_a_device_is_refused(http: httpx.AsyncClient) -> None:
    response = await http.post(HEARTBEAT)
    assert response.status_code == 400
    assert response.json()["code"] == "USER_ACTIVITY_ANONYMOUS_ID_REQUIRED"


NIL_UUID = "00000000-0000-0000-0000-000000000000"
# Every route that reads X-Anonymous-Id, with a body it accepts.
DEVICE_ROUTES = [
    pytest.param("POST", START, None, id="start"),
    pytest.param("POST", HEARTBEAT, None, id="heartbeat"),
    pytest.param("POST", "/api/user-activity/sessions/link", None, id="link"),
    pytest.param("GET", "/api/user-activity/sessions", None, id="own history"),
    pytest.param("POST", "/api/user-activity/actions", {"type": "click"}, id="actions"),
    pytest.param(
        "POST", "/api/user-activity/property-views", {"propertyObjectId": str(new_id())}, id="view"
    ),
    pytest.param("POST", f"/api/user-activity/property-views/{new_id()}/end", None, id="end view"),
]


@pytest.mark.parametrize("anonymous_id", ["not-a-uuid", NIL_UUID])
@pytest.mark.parametrize(("method", "path", "body"), DEVICE_ROUTES)
async def test_a_malformed_or_nil_anonymous_id_is_refused_wherever_it_is_read(
    http: httpx.AsyncClient,
    new_user: UserFactory,
    method: str,
    path: str,
    body: dict[str, str] | None,
    anonymous_id: str,
) -> None:
    """SPEC §8: the nil UUID is no device; every client that sent it would share one."""
    # A user for link, which reads the header only after the caller; none for the history,
    # which reads it only for a guest.
    user = None if method == "GET" else await new_user()
    headers = {"X-Anonymous-Id": anonymous_id, **(user.headers if user else {})}
    response = await http.request(method, path, headers=headers, json=body)
    assert response.status_code == 400
    assert response.json()["code"] == "USER_ACTIVITY_ANONYMOUS_ID_INVALID"


@pytest.mark.parametrize(
    ("path", "field"),
    [
        (START, "createdAt"),
        (START, "lastActivityAt"),
        (HEARTBEAT, "lastActivityAt"),
        (HEARTBEAT, "endedAt"),
        (HEARTBEAT, "anything"),
    ],
)
async def test_a_client_timestamp_or_unknown_field_is_rejected(
    http: httpx.AsyncClient, runtime: Runtime, path: str, field: str
) -> None:
    """INV-SES-004: only the server clock sets times."""
    anonymous_id = new_id()
    response = await http.post(
        path, headers=device(anonymous_id), json={field: "2020-01-01T00:00:00Z"}
    )
    assert response.status_code == 422
    assert await sessions_of(runtime, anonymous_id) == []


async def test_the_peer_address_is_stored_but_never_returned(
    http: httpx.AsyncClient, runtime: Runtime
) -> None:
    # No proxy is trusted by default, so a client cannot choose its address with the header.
    response = await http.post(START, headers={"X-Forwarded-For": "198.51.100.1"})
    [row] = await sessions_of(runtime, uuid.UUID(response.json()["anonymousId"]))
    assert row["device_ip"] == "127.0.0.1"
    assert "127.0.0.1" not in response.text
    assert "ip" not in {key.lower() for key in response.json()}


async def test_the_heartbeat_is_documented_in_openapi(http: httpx.AsyncClient) -> None:
    operation = (await http.get("/openapi.json")).json()["paths"][HEARTBEAT]["post"]
    assert [parameter["name"] for parameter in operation["parameters"]] == ["X-Anonymous-Id"]
    schema = operation["requestBody"]["content"]["application/json"]["schema"]
    assert schema["additionalProperties"] is False
    assert "200" in operation["responses"]


async def test_successful_heartbeats_are_counted_but_not_logged_line_by_line(
    http: httpx.AsyncClient, captured_logs: LogCapture
) -> None:
    anonymous_id = new_id()
    await http.post(START, headers=device(anonymous_id))
    ok = await http.post(HEARTBEAT, headers=device(anonymous_id))
    refused = await http.post(HEARTBEAT)
    # The server writes a request's line just after answering it: wait for the later one.
    await wait_until(
        lambda: refused.headers["x-request-id"] in "\n".join(captured_logs.lines()), timeout=5
    )
    assert ok.headers["x-request-id"] not in "\n".join(captured_logs.lines())
    metrics = (await http.get("/metrics")).text
    assert 'route="/api/user-activity/sessions/heartbeat",status="200"' in metrics

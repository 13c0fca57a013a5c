"""The device list, logout and revoke, and Bearer authentication on identity's routes."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

import httpx

from pin_sessions.identity.events import SESSION_REVOKED_TOPIC
from pin_sessions.platform.clock import FixedClock
from pin_sessions.platform.runtime import Runtime
from tests.conftest import T0
from tests.identity.flows import (
    DESKTOP_UA,
    IPHONE_UA,
    bearer,
    new_phone,
    outbox_events,
    problem_code,
    refresh,
    session_row,
    sign_in,
)
from tests.support.tokens import Tokens

SESSIONS = "/api/identity/sessions"
LOGOUT = "/api/identity/sessions/logout"


async def test_the_device_list_shows_live_sessions_parsed_and_marks_the_current_one(
    http: httpx.AsyncClient, clock: FixedClock
) -> None:
    phone = new_phone()
    phone_session = await sign_in(http, phone, user_agent=IPHONE_UA)
    clock.advance(timedelta(minutes=1))
    desktop = await sign_in(http, phone, user_agent=DESKTOP_UA)
    gone = await sign_in(http, phone, user_agent=DESKTOP_UA)
    assert (await http.post(LOGOUT, headers=bearer(gone))).status_code == 204
    response = await http.get(SESSIONS, headers=bearer(desktop))
    assert response.status_code == 200
    items = response.json()["items"]
    assert [item["sessionId"] for item in items] == [
        desktop["sessionId"],
        phone_session["sessionId"],
    ]
    assert items[0] == {
        "sessionId": desktop["sessionId"],
        "status": "Active",
        "createdAt": "2026-11-29T12:01:00Z",
        "lastUsedAt": "2026-11-29T12:01:00Z",
        "expiresAt": "2026-12-29T12:01:00Z",
        "device": {"type": "Desktop", "os": "Windows 10", "browser": "Chrome 120"},
        "current": True,
    }
    assert items[1]["device"] == {"type": "Mobile", "os": "iOS 17", "browser": "Mobile Safari 17"}
    assert items[1]["current"] is False
    assert "127.0.0.1" not in response.text


async def test_logout_revokes_the_current_session_and_emits_session_revoked(
    http: httpx.AsyncClient, runtime: Runtime
) -> None:
    tokens = await sign_in(http)
    response = await http.post(LOGOUT, headers=bearer(tokens))
    assert response.status_code == 204
    async with runtime.database.connection() as conn:
        row = await session_row(conn, tokens["sessionId"])
        events = await outbox_events(conn, SESSION_REVOKED_TOPIC)
    assert (row["status"], row["revoked_reason"], row["revoked_at"]) == ("Revoked", "Logout", T0)
    assert [event["payload"] for event in events] == [
        {
            "RefreshSessionId": tokens["sessionId"],
            "UserId": tokens["userId"],
            "RevokedAt": T0.isoformat(),
            "Reason": "Logout",
        }
    ]
    again = await http.post(LOGOUT, headers=bearer(tokens))
    assert again.status_code == 401


async def test_logout_and_revoke_refuse_unknown_body_fields_and_change_nothing(
    http: httpx.AsyncClient, runtime: Runtime
) -> None:
    phone = new_phone()
    here, there, elsewhere = [await sign_in(http, phone) for _ in range(3)]
    routes = [
        ("POST", LOGOUT),
        ("DELETE", f"{SESSIONS}/{there['sessionId']}"),
        ("DELETE", SESSIONS),
    ]
    for method, path in routes:
        response = await http.request(method, path, json={"x": 1}, headers=bearer(here))
        assert response.status_code == 422, (method, path)
        assert problem_code(response) == "VALIDATION_ERROR"
    async with runtime.database.connection() as conn:
        rows = [await session_row(conn, t["sessionId"]) for t in (here, there, elsewhere)]
        assert await outbox_events(conn, SESSION_REVOKED_TOPIC) == []
    assert [row["status"] for row in rows] == ["Active"] * 3
    # An empty object is no field at all: each route does its work (logout last, as it
    # ends the session the others are called with).
    for method, path in (*routes[1:], routes[0]):
        response = await http.request(method, path, json={}, headers=bearer(here))
        assert response.status_code == 204, (method, path, response.text)
    async with runtime.database.connection() as conn:
        reasons = [
            (await session_row(conn, t["sessionId"]))["revoked_reason"]
            for t in (here, there, elsewhere)
        ]
    assert reasons == ["Logout", "RevokedByUser", "RevokedByUser"]


async def test_a_user_revokes_one_own_session_but_never_another_users(
    http: httpx.AsyncClient, runtime: Runtime
) -> None:
    phone = new_phone()
    here, there = await sign_in(http, phone), await sign_in(http, phone)
    stranger = await sign_in(http)
    foreign = await http.delete(f"{SESSIONS}/{stranger['sessionId']}", headers=bearer(here))
    assert foreign.status_code == 404
    assert problem_code(foreign) == "IDENTITY_SESSION_NOT_FOUND"
    unknown = await http.delete(f"{SESSIONS}/{uuid.uuid4()}", headers=bearer(here))
    assert unknown.status_code == 404
    # Only a UUID names a session: anything else is no resource at all.
    malformed = await http.delete(f"{SESSIONS}/not-a-uuid", headers=bearer(here))
    assert (malformed.status_code, problem_code(malformed)) == (404, "NOT_FOUND")
    response = await http.delete(f"{SESSIONS}/{there['sessionId']}", headers=bearer(here))
    assert response.status_code == 204
    async with runtime.database.connection() as conn:
        revoked = await session_row(conn, there["sessionId"])
        untouched = await session_row(conn, stranger["sessionId"])
        events = await outbox_events(conn, SESSION_REVOKED_TOPIC)
    assert (revoked["status"], revoked["revoked_reason"]) == ("Revoked", "RevokedByUser")
    assert untouched["status"] == "Active"
    assert [event["aggregate_id"] for event in events] == [there["sessionId"]]
    assert problem_code(await refresh(http, there["refreshToken"])) == "IDENTITY_SESSION_REVOKED"
    assert (await http.get(SESSIONS, headers=bearer(here))).status_code == 200


async def test_parallel_revokes_of_one_session_have_one_winner(
    http: httpx.AsyncClient, runtime: Runtime
) -> None:
    phone = new_phone()
    here, there = await sign_in(http, phone), await sign_in(http, phone)
    responses = await asyncio.gather(
        *(http.delete(f"{SESSIONS}/{there['sessionId']}", headers=bearer(here)) for _ in range(3))
    )
    assert sorted(response.status_code for response in responses) == [204, 404, 404]
    async with runtime.database.connection() as conn:
        assert len(await outbox_events(conn, SESSION_REVOKED_TOPIC)) == 1


async def test_revoking_all_other_sessions_keeps_the_current_one(
    http: httpx.AsyncClient, runtime: Runtime
) -> None:
    phone = new_phone()
    current, *others = [await sign_in(http, phone) for _ in range(3)]
    stranger = await sign_in(http)
    response = await http.delete(SESSIONS, headers=bearer(current))
    assert response.status_code == 204
    async with runtime.database.connection() as conn:
        statuses = {
            key: (await session_row(conn, tokens["sessionId"]))["status"]
            for key, tokens in (("current", current), ("stranger", stranger))
        }
        reasons = {
            (await session_row(conn, tokens["sessionId"]))["revoked_reason"] for tokens in others
        }
        events = await outbox_events(conn, SESSION_REVOKED_TOPIC)
    assert statuses == {"current": "Active", "stranger": "Active"}
    assert reasons == {"RevokedByUser"}
    assert sorted(event["aggregate_id"] for event in events) == sorted(
        tokens["sessionId"] for tokens in others
    )
    items = (await http.get(SESSIONS, headers=bearer(current))).json()["items"]
    assert [item["sessionId"] for item in items] == [current["sessionId"]]


async def test_user_routes_refuse_missing_garbage_expired_and_foreign_tokens(
    http: httpx.AsyncClient, clock: FixedClock, runtime: Runtime
) -> None:
    tokens = await sign_in(http)
    minted = Tokens.of(runtime)
    user_id, session_id = uuid.UUID(tokens["userId"]), uuid.UUID(tokens["sessionId"])
    foreign = await minted.forged_access(user_id, session_id, now=T0)
    for headers in (
        {},
        {"Authorization": "Bearer not.a.jwt"},
        {"Authorization": "Basic dXNlcjpwYXNz"},
        {"Authorization": f"Bearer {foreign}"},
    ):
        for method, path in (("GET", SESSIONS), ("POST", LOGOUT), ("DELETE", SESSIONS)):
            response = await http.request(method, path, headers=headers)
            assert response.status_code == 401, (headers, path)
    m2m = await minted.m2m("svc", ["admin"], now=T0)
    for method, path in (("GET", SESSIONS), ("POST", LOGOUT), ("DELETE", SESSIONS)):
        response = await http.request(method, path, headers={"Authorization": f"Bearer {m2m}"})
        assert (response.status_code, response.json()["code"]) == (401, "AUTH_USER_TOKEN_REQUIRED")
    clock.advance(timedelta(minutes=15))
    assert (await http.get(SESSIONS, headers=bearer(tokens))).status_code == 401


async def test_an_access_token_dies_with_its_session_even_before_it_expires(
    http: httpx.AsyncClient, clock: FixedClock
) -> None:
    phone = new_phone()
    tokens, other = await sign_in(http, phone), await sign_in(http, phone)
    assert (await http.delete(SESSIONS, headers=bearer(other))).status_code == 204
    response = await http.get(SESSIONS, headers=bearer(tokens))
    assert response.status_code == 401
    assert problem_code(response) == "AUTH_SESSION_NOT_ACTIVE"


async def test_oversized_bodies_are_rejected(http: httpx.AsyncClient) -> None:
    response = await http.post(
        "/api/identity/sessions/refresh", json={"refreshToken": "x" * 70_000}
    )
    assert response.status_code == 413
    assert problem_code(response) == "PAYLOAD_TOO_LARGE"
    long_token = await http.post("/api/identity/sessions/refresh", json={"refreshToken": "x" * 300})
    assert long_token.status_code == 422

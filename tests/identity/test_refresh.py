"""Refresh: rotation, the replay grace for racing clients, reuse detection (SPEC §3)."""

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


async def test_refresh_rotates_the_session_into_a_successor_of_the_same_family(
    http: httpx.AsyncClient, clock: FixedClock, runtime: Runtime
) -> None:
    first = await sign_in(http)
    clock.advance(timedelta(days=1))
    response = await refresh(http, first["refreshToken"])
    assert response.status_code == 200
    second = response.json()
    assert second["userId"] == first["userId"]
    assert second["sessionId"] != first["sessionId"]
    assert second["refreshToken"] != first["refreshToken"]
    async with runtime.database.connection() as conn:
        parent = await session_row(conn, first["sessionId"])
        successor = await session_row(conn, second["sessionId"])
    assert parent["status"] == "Rotated"
    assert parent["rotated_at"] == T0 + timedelta(days=1)
    assert parent["replaced_by"] == uuid.UUID(second["sessionId"])
    assert successor["status"] == "Active"
    assert successor["family_id"] == parent["family_id"]
    # Sliding TTL: the successor lives 30 days from its own creation.
    assert successor["expires_at"] == T0 + timedelta(days=31)
    # The old access token died with its session; the new one works.
    assert (await http.get("/api/identity/sessions", headers=bearer(first))).status_code == 401
    assert (await http.get("/api/identity/sessions", headers=bearer(second))).status_code == 200


async def test_a_refresh_keeps_the_chains_device_and_takes_the_address_it_came_from(
    http: httpx.AsyncClient, runtime: Runtime
) -> None:
    tokens = await sign_in(http, user_agent=IPHONE_UA)
    async with runtime.database.connection() as conn:
        # Signed in elsewhere: the refresh below comes from the test client's loopback.
        await conn.execute(
            "update identity.refresh_sessions set device_ip = '203.0.113.9' where id = $1",
            uuid.UUID(tokens["sessionId"]),
        )
    # Another user agent, then none at all: neither changes which device the chain is.
    for user_agent in (DESKTOP_UA, ""):
        response = await refresh(http, tokens["refreshToken"], headers={"User-Agent": user_agent})
        assert response.status_code == 200, response.text
        tokens = response.json()
    async with runtime.database.connection() as conn:
        successor = await session_row(conn, tokens["sessionId"])
    assert (successor["device_user_agent"], successor["device_ip"]) == (IPHONE_UA, "127.0.0.1")
    items = (await http.get("/api/identity/sessions", headers=bearer(tokens))).json()["items"]
    assert [item["device"] for item in items] == [
        {"type": "Mobile", "os": "iOS 17", "browser": "Mobile Safari 17"}
    ]


async def test_parallel_refreshes_of_one_token_within_the_interval_get_the_same_successor(
    http: httpx.AsyncClient, runtime: Runtime
) -> None:
    tokens = await sign_in(http)
    responses = await asyncio.gather(*(refresh(http, tokens["refreshToken"]) for _ in range(4)))
    assert [response.status_code for response in responses] == [200] * 4
    pairs = {
        (response.json()["sessionId"], response.json()["refreshToken"]) for response in responses
    }
    assert len(pairs) == 1
    async with runtime.database.connection() as conn:
        statuses = await conn.fetch(
            "select status, count(*) from identity.refresh_sessions group by status"
        )
    assert {row["status"]: row["count"] for row in statuses} == {"Rotated": 1, "Active": 1}


async def test_a_repeat_at_the_end_of_the_interval_still_gets_the_same_successor(
    http: httpx.AsyncClient, clock: FixedClock
) -> None:
    tokens = await sign_in(http)
    first = (await refresh(http, tokens["refreshToken"])).json()
    clock.advance(timedelta(seconds=10))
    again = await refresh(http, tokens["refreshToken"])
    assert again.status_code == 200
    assert again.json()["refreshToken"] == first["refreshToken"]
    assert again.json()["sessionId"] == first["sessionId"]


async def test_reuse_after_the_interval_revokes_the_whole_family(
    http: httpx.AsyncClient, clock: FixedClock, runtime: Runtime
) -> None:
    original = await sign_in(http)
    other_device = await sign_in(http)  # another family: untouched
    second = (await refresh(http, original["refreshToken"])).json()
    clock.advance(timedelta(seconds=5))
    third = (await refresh(http, second["refreshToken"])).json()
    clock.advance(timedelta(seconds=11))
    reused = await refresh(http, second["refreshToken"])
    assert reused.status_code == 401
    assert problem_code(reused) == "IDENTITY_REFRESH_TOKEN_REUSED"
    async with runtime.database.connection() as conn:
        live = await session_row(conn, third["sessionId"])
        untouched = await session_row(conn, other_device["sessionId"])
        events = await outbox_events(conn, SESSION_REVOKED_TOPIC)
    assert (live["status"], live["revoked_reason"]) == ("Revoked", "TokenReuse")
    assert live["revoked_at"] == T0 + timedelta(seconds=16)
    assert untouched["status"] == "Active"
    assert events == [
        {
            "event_type": "pin.identity.session-revoked",
            "version": 1,
            "aggregate_type": "RefreshSession",
            "aggregate_id": third["sessionId"],
            "payload": {
                "RefreshSessionId": third["sessionId"],
                "UserId": original["userId"],
                "RevokedAt": (T0 + timedelta(seconds=16)).isoformat(),
                "Reason": "TokenReuse",
            },
        }
    ]
    # The thief's and the owner's tokens are both dead now.
    for token in (third["refreshToken"], original["refreshToken"]):
        assert (await refresh(http, token)).status_code == 401
    assert (await http.get("/api/identity/sessions", headers=bearer(third))).status_code == 401


async def test_an_unknown_refresh_token_is_not_found(http: httpx.AsyncClient) -> None:
    response = await refresh(http, "bm90LWEtdG9rZW4")
    assert response.status_code == 401
    assert problem_code(response) == "IDENTITY_SESSION_NOT_FOUND"
    assert response.headers["www-authenticate"] == "Bearer"


async def test_an_active_session_past_its_expiry_cannot_be_refreshed(
    http: httpx.AsyncClient, clock: FixedClock, runtime: Runtime
) -> None:
    tokens = await sign_in(http)
    clock.advance(timedelta(days=30))  # expires_at reached; the job has not run
    response = await refresh(http, tokens["refreshToken"])
    assert response.status_code == 401
    assert problem_code(response) == "IDENTITY_SESSION_EXPIRED"
    async with runtime.database.connection() as conn:
        assert (await session_row(conn, tokens["sessionId"]))["status"] == "Active"
        await conn.execute(
            "update identity.refresh_sessions set status = 'Expired' where id = $1",
            uuid.UUID(tokens["sessionId"]),
        )
    assert problem_code(await refresh(http, tokens["refreshToken"])) == "IDENTITY_SESSION_EXPIRED"


async def test_a_revoked_session_cannot_be_refreshed(http: httpx.AsyncClient) -> None:
    tokens = await sign_in(http)
    assert (
        await http.post("/api/identity/sessions/logout", headers=bearer(tokens))
    ).status_code == 204
    response = await refresh(http, tokens["refreshToken"])
    assert response.status_code == 401
    assert problem_code(response) == "IDENTITY_SESSION_REVOKED"


async def test_a_replay_after_the_successor_was_revoked_is_refused(
    http: httpx.AsyncClient,
) -> None:
    tokens = await sign_in(http)
    successor = (await refresh(http, tokens["refreshToken"])).json()
    logout = await http.post("/api/identity/sessions/logout", headers=bearer(successor))
    assert logout.status_code == 204
    response = await refresh(http, tokens["refreshToken"])
    assert response.status_code == 401
    assert problem_code(response) == "IDENTITY_SESSION_REVOKED"


async def test_refresh_racing_logout_has_one_winner(
    http: httpx.AsyncClient, runtime: Runtime
) -> None:
    for _ in range(3):
        tokens = await sign_in(http, new_phone())
        refreshed, logout = await asyncio.gather(
            refresh(http, tokens["refreshToken"]),
            http.post("/api/identity/sessions/logout", headers=bearer(tokens)),
        )
        async with runtime.database.connection() as conn:
            row = await session_row(conn, tokens["sessionId"])
            revoked = [
                event
                for event in await outbox_events(conn, SESSION_REVOKED_TOPIC)
                if event["aggregate_id"] == tokens["sessionId"]
            ]
        if refreshed.status_code == 200:
            assert logout.status_code == 401
            assert row["status"] == "Rotated" and revoked == []
        else:
            assert logout.status_code == 204
            assert problem_code(refreshed) == "IDENTITY_SESSION_REVOKED"
            assert (row["status"], row["revoked_reason"]) == ("Revoked", "Logout")
            assert len(revoked) == 1

"""SPEC §10 in identity: the caller's export, and the erasure of their account.

Over the API in process, on a real database: what is exported (and what is not), what an
erasure deletes and publishes, the recent-sign-in rule, repeats, and the races with a
second erasure and with a sign-in of the same phone.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import timedelta
from typing import Any

import httpx

from pin_sessions.platform.clock import FixedClock
from pin_sessions.platform.runtime import Runtime
from tests.identity.flows import (
    bearer,
    confirm,
    dev_code,
    new_phone,
    problem_code,
    request_code,
    sign_in,
)

ME = "/api/identity/me"
EXPORT = "/api/identity/me/export"


async def _rows(runtime: Runtime, query: str, *args: Any) -> list[dict[str, Any]]:
    async with runtime.database.connection() as conn:
        return [dict(row) for row in await conn.fetch(query, *args)]


async def _user_state(runtime: Runtime, user_id: str, phone: str) -> dict[str, int]:
    counts = {}
    for name, query, arg in (
        ("users", "select count(*) from identity.users where id = $1::uuid", user_id),
        ("users by phone", "select count(*) from identity.users where phone_number = $1", phone),
        (
            "refresh sessions",
            "select count(*) from identity.refresh_sessions where user_id = $1::uuid",
            user_id,
        ),
        (
            "sign-in requests",
            "select count(*) from identity.sign_in_confirmation_requests where phone_number = $1",
            phone,
        ),
        ("erasures", "select count(*) from identity.erasures where user_id = $1::uuid", user_id),
        (
            "user-erased events",
            "select count(*) from messaging.outbox where event_type = 'pin.identity.user-erased' "
            "and aggregate_id = $1",
            user_id,
        ),
    ):
        async with runtime.database.connection() as conn:
            counts[name] = await conn.fetchval(query, arg)
    return counts


async def test_the_export_holds_the_callers_phone_history_and_devices_with_ips_masked(
    http: httpx.AsyncClient,
) -> None:
    phone, other_phone = new_phone(), new_phone()
    tokens = await sign_in(http, phone)
    await sign_in(http, phone)  # a second device
    await sign_in(http, other_phone)

    response = await http.get(EXPORT, headers=bearer(tokens))

    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/json"
    assert response.headers["cache-control"] == "no-store"
    document = response.json()
    assert document["userId"] == tokens["userId"]
    assert document["phoneNumber"] == phone
    assert len(document["signInRequests"]) == 2
    assert {item["status"] for item in document["signInRequests"]} == {"Confirmed"}
    assert len(document["sessions"]) == 2
    assert {item["status"] for item in document["sessions"]} == {"Active"}
    assert {item["signedInAt"] for item in document["sessions"]} == {"2026-11-29T12:00:00+00:00"}
    assert document["sessions"][0]["device"] == {
        "type": "Mobile",
        "os": "iOS 17",
        "browser": "Mobile Safari 17",
    }
    # The in-process client connects from 127.0.0.1: only its network is exported.
    addresses = {item["ipAddress"] for item in document["signInRequests"] + document["sessions"]}
    assert addresses == {"127.0.0.0/24"}
    assert other_phone not in response.text
    assert "127.0.0.1" not in response.text


async def test_erasing_deletes_the_account_and_publishes_user_erased_once(
    http: httpx.AsyncClient, runtime: Runtime, clock: FixedClock
) -> None:
    phone = new_phone()
    tokens = await sign_in(http, phone)
    other = await sign_in(http, phone)  # another live device: revoked too
    user_id = tokens["userId"]
    pending = await request_code(http, phone)  # a sign-in under way

    response = await http.delete(ME, headers=bearer(tokens))

    assert response.status_code == 204, response.text
    assert await _user_state(runtime, user_id, phone) == {
        "users": 0,
        "users by phone": 0,
        "refresh sessions": 0,
        "sign-in requests": 0,
        "erasures": 1,
        "user-erased events": 1,
    }
    [proof] = await _rows(runtime, "select * from identity.erasures")
    assert (str(proof["user_id"]), proof["requested_at"], proof["requested_by"]) == (
        user_id,
        clock.now(),
        "user",
    )
    [event] = await _rows(
        runtime,
        "select * from messaging.outbox where event_type = 'pin.identity.user-erased'",
    )
    assert event["topic"] == "pin.identity.user-erased.v1"
    assert (event["aggregate_type"], event["aggregate_id"]) == ("User", user_id)
    assert event["message_id"] == proof["message_id"]
    assert event["payload"] == {"UserId": user_id, "ErasedAt": clock.now().isoformat()}
    revoked = await _rows(
        runtime,
        "select payload from messaging.outbox where event_type = 'pin.identity.session-revoked' "
        "order by position",
    )
    assert {row["payload"]["RefreshSessionId"] for row in revoked} == {
        tokens["sessionId"],
        other["sessionId"],
    }
    assert {row["payload"]["Reason"] for row in revoked} == {"RevokedByUser"}
    # Every token and code of the account is dead.
    sessions = await http.get("/api/identity/sessions", headers=bearer(other))
    assert sessions.status_code == 401
    refreshed = await http.post(
        "/api/identity/sessions/refresh", json={"refreshToken": other["refreshToken"]}
    )
    assert problem_code(refreshed) == "IDENTITY_SESSION_NOT_FOUND"
    late = await confirm(http, pending, await _code_of_erased(http, pending))
    assert problem_code(late) == "IDENTITY_CONFIRMATION_NOT_FOUND"


async def _code_of_erased(http: httpx.AsyncClient, request_id: str) -> str:
    """The dev endpoint no longer knows the request; any code will do for the confirm."""
    response = await http.get(f"/dev/sign-in-codes/{request_id}")
    assert response.status_code == 404
    return "000000"


async def test_erasing_asks_for_an_access_token_of_the_last_10_minutes(
    http: httpx.AsyncClient, runtime: Runtime, clock: FixedClock
) -> None:
    phone = new_phone()
    tokens = await sign_in(http, phone)
    clock.advance(timedelta(minutes=10, seconds=1))  # the access token lives 15

    refused = await http.delete(ME, headers=bearer(tokens))

    assert refused.status_code == 401
    assert problem_code(refused) == "IDENTITY_RECENT_SIGN_IN_REQUIRED"
    state = await _user_state(runtime, tokens["userId"], phone)
    assert (state["users"], state["erasures"], state["user-erased events"]) == (1, 0, 0)

    fresh = await sign_in(http, phone)
    assert (await http.delete(ME, headers=bearer(fresh))).status_code == 204


async def test_an_erasure_repeated_answers_204_and_changes_nothing(
    http: httpx.AsyncClient, runtime: Runtime, clock: FixedClock
) -> None:
    phone = new_phone()
    tokens = await sign_in(http, phone)
    assert (await http.delete(ME, headers=bearer(tokens))).status_code == 204
    outbox_before = await _rows(runtime, "select message_id from messaging.outbox")
    clock.advance(timedelta(minutes=11))  # no longer recent: the repeat asks nothing new

    again = await http.delete(ME, headers=bearer(tokens))

    assert again.status_code == 204
    assert await _rows(runtime, "select message_id from messaging.outbox") == outbox_before
    assert len(await _rows(runtime, "select * from identity.erasures")) == 1


async def test_an_export_of_an_erased_user_is_404(http: httpx.AsyncClient) -> None:
    tokens = await sign_in(http)
    assert (await http.delete(ME, headers=bearer(tokens))).status_code == 204

    response = await http.get(EXPORT, headers=bearer(tokens))

    assert response.status_code == 404
    assert problem_code(response) == "IDENTITY_USER_NOT_FOUND"


async def test_signed_out_tokens_neither_export_nor_erase(http: httpx.AsyncClient) -> None:
    tokens = await sign_in(http)
    assert (
        await http.post("/api/identity/sessions/logout", headers=bearer(tokens))
    ).status_code == 204

    for response in (
        await http.get(EXPORT, headers=bearer(tokens)),
        await http.delete(ME, headers=bearer(tokens)),
        await http.delete(ME),
    ):
        assert response.status_code == 401, response.text


async def test_a_sign_in_after_the_erasure_is_a_new_user(http: httpx.AsyncClient) -> None:
    phone = new_phone()
    tokens = await sign_in(http, phone)
    assert (await http.delete(ME, headers=bearer(tokens))).status_code == 204

    again = await sign_in(http, phone)

    assert again["userId"] != tokens["userId"]
    export = await http.get(EXPORT, headers=bearer(again))
    assert export.json()["userId"] == again["userId"]
    assert len(export.json()["signInRequests"]) == 1


async def test_parallel_erasures_of_one_user_make_one_erasure(
    http: httpx.AsyncClient, runtime: Runtime
) -> None:
    phone = new_phone()
    devices = [await sign_in(http, phone) for _ in range(4)]

    answers = await asyncio.gather(*(http.delete(ME, headers=bearer(d)) for d in devices))

    assert [answer.status_code for answer in answers] == [204] * 4
    state = await _user_state(runtime, devices[0]["userId"], phone)
    assert (state["erasures"], state["user-erased events"]) == (1, 1)


async def test_a_sign_in_racing_the_erasure_of_its_phone_is_either_erased_or_a_new_user(
    http: httpx.AsyncClient, runtime: Runtime
) -> None:
    """Many rounds, each a confirm and an erasure of the same phone at the same moment."""
    for _ in range(8):
        phone = new_phone()
        tokens = await sign_in(http, phone)
        request_id = await request_code(http, phone)
        code = await dev_code(http, request_id)

        erased, confirmed = await asyncio.gather(
            http.delete(ME, headers=bearer(tokens)), confirm(http, request_id, code)
        )

        assert erased.status_code == 204, erased.text
        users = await _rows(runtime, "select id from identity.users where phone_number = $1", phone)
        if confirmed.status_code == 200:
            newcomer = confirmed.json()["userId"]
            if newcomer == tokens["userId"]:
                # The confirm won: its session was the erased user's and went with it.
                assert users == []
                assert (await http.get(EXPORT, headers=bearer(confirmed.json()))).status_code == 404
            else:
                # The erasure won: the phone signed in as a new user.
                assert [str(row["id"]) for row in users] == [newcomer]
        else:
            # The erasure deleted the request before the confirm read it.
            assert problem_code(confirmed) == "IDENTITY_CONFIRMATION_NOT_FOUND"
            assert users == []
        sessions = await _rows(
            runtime,
            "select user_id from identity.refresh_sessions where user_id = $1::uuid",
            tokens["userId"],
        )
        assert sessions == []


async def test_the_export_is_json_however_it_is_chunked(http: httpx.AsyncClient) -> None:
    tokens = await sign_in(http)
    async with http.stream("GET", EXPORT, headers=bearer(tokens)) as response:
        body = b"".join([chunk async for chunk in response.aiter_bytes()])
    assert json.loads(body)["userId"] == tokens["userId"]
    assert uuid.UUID(json.loads(body)["sessions"][0]["sessionId"])

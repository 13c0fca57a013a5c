"""Sign-in by one-time code over real HTTP and PostgreSQL (SPEC §3, §4)."""

from __future__ import annotations

import asyncio
import hashlib
import uuid
from collections import Counter
from datetime import timedelta

import httpx
import jwt
import pytest

from pin_sessions.identity.events import SIGN_INS_TOPIC
from pin_sessions.platform.clock import FixedClock
from pin_sessions.platform.runtime import Runtime
from tests.conftest import T0
from tests.identity.flows import (
    confirm,
    dev_code,
    new_phone,
    outbox_events,
    problem_code,
    request_code,
    session_row,
    sign_in,
    wrong,
)
from tests.support.tokens import verified_claims

REQUESTS = "/api/identity/sign-in/requests"


async def test_a_sign_in_request_is_created_pending_for_five_minutes_with_only_an_hmac_of_the_code(
    http: httpx.AsyncClient, runtime: Runtime
) -> None:
    phone = new_phone()
    response = await http.post(REQUESTS, json={"phoneNumber": phone})
    assert response.status_code == 201
    body = response.json()
    assert set(body) == {"requestId", "expiresAt"}
    code = await dev_code(http, body["requestId"])
    assert len(code) == 6 and code.isdigit()
    async with runtime.database.connection() as conn:
        row = await conn.fetchrow(
            "select * from identity.sign_in_confirmation_requests where id = $1",
            uuid.UUID(body["requestId"]),
        )
    assert row is not None
    assert row["status"] == "Pending" and row["attempts"] == 0
    assert row["expires_at"] == T0 + timedelta(minutes=5)
    assert row["phone_number"] == phone
    assert code.encode() not in row["code_hash"]
    assert row["code_hash"] != hashlib.sha256(code.encode()).digest()
    assert len(row["code_hash"]) == 32


async def test_a_phone_that_is_not_e164_is_refused(http: httpx.AsyncClient) -> None:
    for phone in ("07911123456", "+0123456789", "+44 7911 123456", "+1234567890123456", 447911):
        response = await http.post(REQUESTS, json={"phoneNumber": phone})
        assert response.status_code == 422, phone
        assert problem_code(response) == "VALIDATION_ERROR"
        assert str(phone) not in response.text


async def test_unknown_body_fields_are_refused(http: httpx.AsyncClient) -> None:
    response = await http.post(
        REQUESTS, json={"phoneNumber": new_phone(), "createdAt": "2020-01-01T00:00:00Z"}
    )
    assert response.status_code == 422
    response = await confirm(http, str(uuid.uuid4()), "123456")
    assert response.status_code == 404
    response = await http.post(
        "/api/identity/sign-in/confirm",
        json={"requestId": str(uuid.uuid4()), "code": "123456", "extra": 1},
    )
    assert response.status_code == 422


async def test_malformed_request_ids_and_codes_that_are_no_short_string_are_refused(
    http: httpx.AsyncClient,
) -> None:
    for body in (
        {"requestId": "not-a-uuid", "code": "123456"},
        {"requestId": str(uuid.uuid4()), "code": 123456},
        {"requestId": str(uuid.uuid4()), "code": None},
        {"requestId": str(uuid.uuid4())},
        {"requestId": str(uuid.uuid4()), "code": "1" * 65},
    ):
        response = await http.post("/api/identity/sign-in/confirm", json=body)
        assert response.status_code == 422, body
        assert problem_code(response) == "VALIDATION_ERROR"
    assert (await http.get("/dev/sign-in-codes/nope")).status_code == 422
    garbage = await http.post(
        REQUESTS, content=b"{not json", headers={"Content-Type": "application/json"}
    )
    assert garbage.status_code == 400


async def test_the_sixth_request_of_a_phone_within_15_minutes_is_refused(
    http: httpx.AsyncClient, clock: FixedClock
) -> None:
    phone = new_phone()
    for _ in range(5):
        await request_code(http, phone)
        clock.advance(timedelta(minutes=2))
    response = await http.post(REQUESTS, json={"phoneNumber": phone})
    assert response.status_code == 429
    assert problem_code(response) == "IDENTITY_TOO_MANY_REQUESTS"
    # Another phone is not affected; and once the first request leaves the window, one more fits.
    await request_code(http, new_phone())
    clock.advance(timedelta(minutes=5, seconds=1))
    await request_code(http, phone)


async def test_a_refused_sign_in_request_says_when_the_phone_may_ask_again(
    http: httpx.AsyncClient, clock: FixedClock
) -> None:
    phone = new_phone()
    for _ in range(5):
        await request_code(http, phone)
        clock.advance(timedelta(minutes=2))
    clock.advance(timedelta(milliseconds=500))
    # The first request, 10 min 0.5 s old, leaves the 15-minute window in 4 min 59.5 s.
    response = await http.post(REQUESTS, json={"phoneNumber": phone})
    assert response.status_code == 429
    assert response.headers["Retry-After"] == "300"
    clock.advance(timedelta(seconds=299))
    assert (await http.post(REQUESTS, json={"phoneNumber": phone})).headers["Retry-After"] == "1"
    clock.advance(timedelta(seconds=1))
    await request_code(http, phone)
    # Now the second request frees the next slot, 2 minutes after the first did.
    response = await http.post(REQUESTS, json={"phoneNumber": phone})
    assert response.headers["Retry-After"] == "120"


async def test_parallel_requests_of_one_phone_never_exceed_the_cap(
    http: httpx.AsyncClient,
) -> None:
    phone = new_phone()
    responses = await asyncio.gather(
        *(http.post(REQUESTS, json={"phoneNumber": phone}) for _ in range(12))
    )
    assert Counter(response.status_code for response in responses) == {201: 5, 429: 7}


async def test_confirm_creates_the_user_opens_a_session_and_emits_a_sign_in_event(
    http: httpx.AsyncClient, runtime: Runtime
) -> None:
    phone = new_phone()
    anonymous_id = str(uuid.uuid4())
    request_id = await request_code(http, phone)
    response = await confirm(
        http,
        request_id,
        await dev_code(http, request_id),
        headers={"X-Anonymous-Id": anonymous_id, "User-Agent": "x" * 2000},
    )
    assert response.status_code == 200
    tokens = response.json()
    assert set(tokens) == {
        "userId",
        "sessionId",
        "accessToken",
        "accessTokenExpiresAt",
        "refreshToken",
        "refreshTokenExpiresAt",
    }
    claims = await verified_claims(http, tokens["accessToken"], audience="pin-api")
    assert jwt.get_unverified_header(tokens["accessToken"])["typ"] == "at+jwt"
    assert claims["iss"] == "http://127.0.0.1:8000"
    assert claims["sub"] == tokens["userId"] and claims["sid"] == tokens["sessionId"]
    assert claims["exp"] - claims["iat"] == 15 * 60
    async with runtime.database.connection() as conn:
        session = await session_row(conn, tokens["sessionId"])
        request = await conn.fetchrow(
            "select status, confirmed_at from identity.sign_in_confirmation_requests where id = $1",
            uuid.UUID(request_id),
        )
        user_phone = await conn.fetchval(
            "select phone_number from identity.users where id = $1", uuid.UUID(tokens["userId"])
        )
        events = await outbox_events(conn, SIGN_INS_TOPIC)
    assert user_phone == phone
    assert request is not None and request["status"] == "Confirmed"
    assert request["confirmed_at"] == T0
    assert session["status"] == "Active" and session["family_id"] == session["id"]
    assert session["expires_at"] == T0 + timedelta(days=30)
    assert session["token_hash"] == hashlib.sha256(tokens["refreshToken"].encode()).digest()
    assert len(session["device_user_agent"]) == 1024
    assert session["device_ip"] == "127.0.0.1"
    assert events == [
        {
            "event_type": "pin.identity.sign-ins",
            "version": 1,
            "aggregate_type": "User",
            "aggregate_id": tokens["userId"],
            "payload": {
                "UserId": tokens["userId"],
                "RefreshSessionId": tokens["sessionId"],
                "AnonymousId": anonymous_id,
                "SignedInAt": T0.isoformat(),
            },
        }
    ]


async def test_a_second_sign_in_of_a_phone_finds_the_same_user(http: httpx.AsyncClient) -> None:
    phone = new_phone()
    first = await sign_in(http, phone)
    second = await sign_in(http, phone)
    assert first["userId"] == second["userId"]
    assert first["sessionId"] != second["sessionId"]


@pytest.mark.parametrize("anonymous_id", ["device-1", "00000000-0000-0000-0000-000000000000"])
async def test_a_malformed_or_nil_anonymous_id_is_refused_and_uses_nothing(
    http: httpx.AsyncClient, anonymous_id: str
) -> None:
    request_id = await request_code(http, new_phone())
    code = await dev_code(http, request_id)
    response = await confirm(http, request_id, code, headers={"X-Anonymous-Id": anonymous_id})
    assert response.status_code == 400
    assert problem_code(response) == "USER_ACTIVITY_ANONYMOUS_ID_INVALID"
    assert (await confirm(http, request_id, code)).status_code == 200


async def test_an_unknown_request_is_not_found(http: httpx.AsyncClient) -> None:
    response = await confirm(http, str(uuid.uuid4()), "123456")
    assert response.status_code == 404
    assert problem_code(response) == "IDENTITY_CONFIRMATION_NOT_FOUND"


async def test_a_wrong_code_uses_one_attempt(http: httpx.AsyncClient, runtime: Runtime) -> None:
    request_id = await request_code(http, new_phone())
    code = await dev_code(http, request_id)
    response = await confirm(http, request_id, wrong(code))
    assert response.status_code == 400
    assert problem_code(response) == "IDENTITY_CONFIRMATION_INVALID_CODE"
    async with runtime.database.connection() as conn:
        attempts = await conn.fetchval(
            "select attempts from identity.sign_in_confirmation_requests where id = $1",
            uuid.UUID(request_id),
        )
    assert attempts == 1
    assert (await confirm(http, request_id, code)).status_code == 200


async def test_a_code_of_another_shape_is_a_wrong_code_and_uses_an_attempt(
    http: httpx.AsyncClient, runtime: Runtime
) -> None:
    request_id = await request_code(http, new_phone())
    code = await dev_code(http, request_id)
    for guess in ("12345", "abcdef", "", code + "0", "1" * 64):
        response = await confirm(http, request_id, guess)
        assert response.status_code == 400, guess
        assert problem_code(response) == "IDENTITY_CONFIRMATION_INVALID_CODE"
    async with runtime.database.connection() as conn:
        attempts = await conn.fetchval(
            "select attempts from identity.sign_in_confirmation_requests where id = $1",
            uuid.UUID(request_id),
        )
    assert attempts == 5
    response = await confirm(http, request_id, code)
    assert problem_code(response) == "IDENTITY_CONFIRMATION_ATTEMPTS_EXCEEDED"


async def test_parallel_codes_of_another_shape_count_exactly_up_to_the_cap(
    http: httpx.AsyncClient,
) -> None:
    request_id = await request_code(http, new_phone())
    guesses = ["12345", "abcdef", "1234567", "x"] * 5
    responses = await asyncio.gather(*(confirm(http, request_id, guess) for guess in guesses))
    assert Counter(response.status_code for response in responses) == {400: 5, 429: 15}


async def test_after_five_wrong_codes_even_the_right_code_is_refused(
    http: httpx.AsyncClient,
) -> None:
    request_id = await request_code(http, new_phone())
    code = await dev_code(http, request_id)
    for _ in range(5):
        assert (await confirm(http, request_id, wrong(code))).status_code == 400
    for guess in (wrong(code), code):
        response = await confirm(http, request_id, guess)
        assert response.status_code == 429
        assert problem_code(response) == "IDENTITY_CONFIRMATION_ATTEMPTS_EXCEEDED"


async def test_spent_attempts_say_how_long_the_request_keeps_refusing(
    http: httpx.AsyncClient, clock: FixedClock
) -> None:
    request_id = await request_code(http, new_phone())
    code = await dev_code(http, request_id)
    for _ in range(5):
        await confirm(http, request_id, wrong(code))
    clock.advance(timedelta(minutes=1, milliseconds=500))
    response = await confirm(http, request_id, code)
    # Until the request expires (5 min after it was made) every try is this 429; then a 410.
    assert response.status_code == 429
    assert response.headers["Retry-After"] == "240"
    clock.advance(timedelta(seconds=240))
    response = await confirm(http, request_id, code)
    assert response.status_code == 410
    assert problem_code(response) == "IDENTITY_CONFIRMATION_EXPIRED"


async def test_parallel_wrong_codes_count_exactly_up_to_the_cap(
    http: httpx.AsyncClient, runtime: Runtime
) -> None:
    request_id = await request_code(http, new_phone())
    code = await dev_code(http, request_id)
    responses = await asyncio.gather(*(confirm(http, request_id, wrong(code)) for _ in range(20)))
    assert Counter(response.status_code for response in responses) == {400: 5, 429: 15}
    async with runtime.database.connection() as conn:
        attempts = await conn.fetchval(
            "select attempts from identity.sign_in_confirmation_requests where id = $1",
            uuid.UUID(request_id),
        )
    assert attempts == 5


async def test_a_confirmed_request_cannot_be_used_again(http: httpx.AsyncClient) -> None:
    request_id = await request_code(http, new_phone())
    code = await dev_code(http, request_id)
    assert (await confirm(http, request_id, code)).status_code == 200
    for guess in (code, wrong(code)):
        response = await confirm(http, request_id, guess)
        assert response.status_code == 409
        assert problem_code(response) == "IDENTITY_CONFIRMATION_ALREADY_USED"


async def test_two_parallel_right_confirms_have_one_winner(
    http: httpx.AsyncClient, runtime: Runtime
) -> None:
    request_id = await request_code(http, new_phone())
    code = await dev_code(http, request_id)
    responses = await asyncio.gather(*(confirm(http, request_id, code) for _ in range(2)))
    assert sorted(response.status_code for response in responses) == [200, 409]
    loser = next(response for response in responses if response.status_code == 409)
    assert problem_code(loser) == "IDENTITY_CONFIRMATION_ALREADY_USED"
    async with runtime.database.connection() as conn:
        sessions = await conn.fetchval("select count(*) from identity.refresh_sessions")
        events = await outbox_events(conn, SIGN_INS_TOPIC)
    assert sessions == 1 and len(events) == 1


async def test_confirm_just_past_expiry_is_refused_while_the_row_is_still_pending(
    http: httpx.AsyncClient, clock: FixedClock, runtime: Runtime
) -> None:
    request_id = await request_code(http, new_phone())
    code = await dev_code(http, request_id)
    clock.advance(timedelta(minutes=5))  # exactly expires_at: no longer "expires_at > now"
    response = await confirm(http, request_id, code)
    assert response.status_code == 410
    assert problem_code(response) == "IDENTITY_CONFIRMATION_EXPIRED"
    clock.advance(timedelta(milliseconds=1))
    assert problem_code(await confirm(http, request_id, wrong(code))) == (
        "IDENTITY_CONFIRMATION_EXPIRED"
    )
    async with runtime.database.connection() as conn:
        row = await conn.fetchrow(
            "select status, attempts from identity.sign_in_confirmation_requests where id = $1",
            uuid.UUID(request_id),
        )
    assert row is not None and (row["status"], row["attempts"]) == ("Pending", 0)


async def test_a_request_expired_by_the_job_is_expired_not_confirmable(
    http: httpx.AsyncClient, clock: FixedClock, runtime: Runtime
) -> None:
    request_id = await request_code(http, new_phone())
    code = await dev_code(http, request_id)
    clock.advance(timedelta(minutes=6))
    async with runtime.database.connection() as conn:
        await conn.execute(
            "update identity.sign_in_confirmation_requests set status = 'Expired' where id = $1",
            uuid.UUID(request_id),
        )
    assert problem_code(await confirm(http, request_id, code)) == "IDENTITY_CONFIRMATION_EXPIRED"


async def test_api_connections_go_back_to_the_pool_without_session_state(
    http: httpx.AsyncClient, runtime: Runtime
) -> None:
    """The API's pool skips the reset round trip, so no route may leave a session lock."""
    tokens = await sign_in(http, new_phone())
    bearer = {"Authorization": f"Bearer {tokens['accessToken']}"}
    assert (await http.get("/api/identity/sessions", headers=bearer)).status_code == 200
    async with runtime.database.connection() as conn:
        held = await conn.fetchval(
            "select count(*) from pg_locks l join pg_stat_activity a on a.pid = l.pid "
            "where l.locktype = 'advisory' and a.datname = current_database() "
            "and a.pid <> pg_backend_pid()"
        )
    assert held == 0

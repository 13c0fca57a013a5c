"""Headers read as one value (SPEC §11): OWS around a value is trimmed, and the header given
twice is a 400 ``DUPLICATE_HEADER`` — ``X-Anonymous-Id``, ``Idempotency-Key`` and
``Authorization``, on every route that reads them, the heartbeat's fast path included.

Over real HTTP, on one raw socket: an HTTP client library would trim the values itself or
refuse to send them, and a parser in the server is what must not trim them for us."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator

import pytest

from pin_sessions.platform.clock import FixedClock
from pin_sessions.platform.ids import new_id
from pin_sessions.platform.runtime import Runtime
from tests.support.raw_http import RawConnection, RawResponse
from tests.support.tokens import Tokens
from tests.support.users import SignedInUser, signed_in_user

HEARTBEAT = "/api/user-activity/sessions/heartbeat"
START = "/api/user-activity/sessions/start"
ACTIONS = "/api/user-activity/actions"
VIEWS = "/api/user-activity/property-views"
DEVICE_HISTORY = "/api/user-activity/sessions"
OWN_SESSIONS = "/api/identity/sessions"
CONFIRM = "/api/identity/sign-in/confirm"
PADDING = " \t "


@pytest.fixture
async def connection(api_url: str) -> AsyncIterator[RawConnection]:
    connection = await RawConnection.open(api_url)
    try:
        yield connection
    finally:
        await connection.close()


@pytest.fixture
async def user(runtime: Runtime, clock: FixedClock) -> SignedInUser:
    async with runtime.database.transaction() as conn:
        return await signed_in_user(conn, Tokens.of(runtime).signer, now=clock.now())


def _json(body: object) -> tuple[bytes, tuple[str, str]]:
    return json.dumps(body).encode(), ("Content-Type", "application/json")


def _duplicate(response: RawResponse, header: str) -> None:
    assert response.status == 400, response.body
    assert response.headers["content-type"] == "application/problem+json"
    problem = response.json()
    assert (problem["code"], problem["header"]) == ("DUPLICATE_HEADER", header)


async def test_whitespace_around_an_anonymous_id_is_trimmed_on_every_reader(
    connection: RawConnection,
) -> None:
    device = str(new_id())
    padded = [("X-Anonymous-Id", device + PADDING)]
    started = await connection.request("POST", START, headers=padded)
    assert started.status == 200, started.body
    assert started.json()["anonymousId"] == device
    # The heartbeat, served ahead of the framework, reads the header the same way.
    beat = await connection.request("POST", HEARTBEAT, headers=[("X-Anonymous-Id", "\t" + device)])
    assert beat.status == 200, beat.body
    assert beat.json()["sessionId"] == started.json()["sessionId"]
    history = await connection.request("GET", DEVICE_HISTORY, headers=padded)
    assert history.status == 200, history.body


async def test_whitespace_around_an_idempotency_key_is_trimmed(connection: RawConnection) -> None:
    device = ("X-Anonymous-Id", str(new_id()))
    body, content_type = _json({"type": "click"})
    first = await connection.request(
        "POST", ACTIONS, body=body, headers=[device, content_type, ("Idempotency-Key", "k-1  ")]
    )
    assert first.status == 201, first.body
    repeat = await connection.request(
        "POST", ACTIONS, body=body, headers=[device, content_type, ("Idempotency-Key", "k-1")]
    )
    assert repeat.json()["actionId"] == first.json()["actionId"]


async def test_whitespace_around_a_bearer_token_is_trimmed(
    connection: RawConnection, user: SignedInUser
) -> None:
    padded = [("Authorization", f"Bearer   {user.access_token}{PADDING}")]
    response = await connection.request("GET", OWN_SESSIONS, headers=padded)
    assert response.status == 200, response.body


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", HEARTBEAT, None),
        ("POST", START, None),
        ("POST", ACTIONS, {"type": "click"}),
        ("GET", DEVICE_HISTORY, None),
        ("POST", CONFIRM, {"requestId": "0193e0c6-1c2a-7b3e-8c1d-2e4f6a8b0c1d", "code": "123456"}),
    ],
)
async def test_two_anonymous_ids_are_a_400_on_every_reader(
    connection: RawConnection, method: str, path: str, body: object
) -> None:
    payload, content_type = _json(body) if body is not None else (b"", ("Accept", "*/*"))
    for second in (str(new_id()), "same"):
        first = str(new_id())
        headers = [content_type, ("X-Anonymous-Id", first)]
        headers.append(("X-Anonymous-Id", first if second == "same" else second))
        _duplicate(
            await connection.request(method, path, body=payload, headers=headers), "X-Anonymous-Id"
        )


@pytest.mark.parametrize("path", [ACTIONS, VIEWS])
async def test_two_idempotency_keys_are_a_400(connection: RawConnection, path: str) -> None:
    body, content_type = _json(
        {"type": "click"} if path == ACTIONS else {"propertyObjectId": str(uuid.uuid4())}
    )
    headers = [
        content_type,
        ("X-Anonymous-Id", str(new_id())),
        ("Idempotency-Key", "a"),
        ("Idempotency-Key", "b"),
    ]
    response = await connection.request("POST", path, body=body, headers=headers)
    _duplicate(response, "Idempotency-Key")


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", OWN_SESSIONS),
        ("POST", HEARTBEAT),
        ("POST", START),
        ("GET", "/api/identity/me/export"),
        ("GET", f"/internal/users/{uuid.UUID(int=1)}/sessions"),
    ],
)
async def test_two_authorization_headers_are_a_400_on_bearer_routes(
    connection: RawConnection, user: SignedInUser, method: str, path: str
) -> None:
    token = ("Authorization", f"Bearer {user.access_token}")
    headers = [("X-Anonymous-Id", str(new_id())), token, token]
    _duplicate(await connection.request(method, path, headers=headers), "Authorization")


async def test_two_authorization_headers_at_the_token_endpoint_are_invalid_request(
    connection: RawConnection,
) -> None:
    basic = ("Authorization", "Basic Y2xpZW50OnNlY3JldA==")
    response = await connection.request(
        "POST",
        "/oauth/token",
        body=b"grant_type=client_credentials",
        headers=[("Content-Type", "application/x-www-form-urlencoded"), basic, basic],
    )
    assert response.status == 400, response.body
    assert response.json()["error"] == "invalid_request"

"""Access tokens carry ``auth_time``: the sign-in that started their refresh family, to the
microsecond (a NumericDate with its fractional part), so sign-ins within one second order.

Tokens are read as another service reads them, verified with the published JWKS.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from pin_sessions.platform.clock import FixedClock
from pin_sessions.platform.runtime import Runtime
from tests.conftest import T0
from tests.identity.flows import refresh, session_row, sign_in
from tests.support.tokens import verified_claims

DAY = timedelta(days=1)


async def _claims(http: httpx.AsyncClient, tokens: dict[str, Any]) -> dict[str, Any]:
    return await verified_claims(http, tokens["accessToken"], audience="pin-api")


def _instant(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


async def test_a_sign_in_s_token_carries_its_own_instant_as_auth_time(
    http: httpx.AsyncClient, clock: FixedClock, runtime: Runtime
) -> None:
    clock.advance(timedelta(seconds=7))
    tokens = await sign_in(http)
    claims = await _claims(http, tokens)
    assert _instant(claims["auth_time"]) == T0 + timedelta(seconds=7)
    assert claims["auth_time"] == claims["iat"]
    async with runtime.database.connection() as conn:
        row = await session_row(conn, tokens["sessionId"])
    assert row["signed_in_at"] == T0 + timedelta(seconds=7)


async def test_auth_time_keeps_the_sign_in_s_microseconds_as_the_event_and_the_row_do(
    http: httpx.AsyncClient, clock: FixedClock, runtime: Runtime
) -> None:
    """One precision end to end: the token's auth_time, the sign-in event's SignedInAt and
    the refresh session's signed_in_at are the same instant; iat stays whole seconds."""
    signed_in_at = T0 + timedelta(seconds=7, microseconds=654_321)
    clock.set(signed_in_at)
    tokens = await sign_in(http)
    claims = await _claims(http, tokens)
    assert isinstance(claims["auth_time"], float)
    assert _instant(claims["auth_time"]) == signed_in_at
    assert claims["iat"] == int(signed_in_at.timestamp())
    async with runtime.database.connection() as conn:
        row = await session_row(conn, tokens["sessionId"])
        payload = await conn.fetchval(
            "select payload from messaging.outbox where event_type = 'pin.identity.sign-ins'"
        )
    assert row["signed_in_at"] == signed_in_at
    assert datetime.fromisoformat(payload["SignedInAt"]) == signed_in_at
    answer = await http.get("/api/identity/sessions", headers=_bearer(tokens))
    assert answer.status_code == 200  # the API accepts a token signed in its sign-in's second


def _bearer(tokens: dict[str, Any]) -> dict[str, str]:
    return {"Authorization": f"Bearer {tokens['accessToken']}"}


async def test_every_refresh_keeps_the_auth_time_of_the_family_s_sign_in(
    http: httpx.AsyncClient, clock: FixedClock, runtime: Runtime
) -> None:
    tokens = await sign_in(http)
    for _ in range(3):
        clock.advance(10 * DAY)
        response = await refresh(http, tokens["refreshToken"])
        assert response.status_code == 200, response.text
        tokens = response.json()
        claims = await _claims(http, tokens)
        assert _instant(claims["auth_time"]) == T0
        assert _instant(claims["iat"]) == clock.now()
    async with runtime.database.connection() as conn:
        row = await session_row(conn, tokens["sessionId"])
    assert row["signed_in_at"] == T0


async def test_racing_refreshes_all_get_the_family_s_auth_time(
    http: httpx.AsyncClient, clock: FixedClock
) -> None:
    """The repeats within the reuse interval are answered from the successor's row."""
    tokens = await sign_in(http)
    clock.advance(DAY)
    responses = await asyncio.gather(*(refresh(http, tokens["refreshToken"]) for _ in range(4)))
    assert {response.status_code for response in responses} == {200}
    clock.advance(timedelta(seconds=5))
    replayed = await refresh(http, tokens["refreshToken"])
    assert replayed.status_code == 200
    for answer in [*responses, replayed]:
        assert _instant((await _claims(http, answer.json()))["auth_time"]) == T0


async def test_another_sign_in_starts_a_family_with_its_own_auth_time(
    http: httpx.AsyncClient, clock: FixedClock
) -> None:
    first = await sign_in(http)
    clock.advance(DAY)
    second = await sign_in(http)
    assert _instant((await _claims(http, first))["auth_time"]) == T0
    assert _instant((await _claims(http, second))["auth_time"]) == T0 + DAY


async def test_a_family_begun_before_auth_time_was_stored_reads_its_first_session(
    http: httpx.AsyncClient, clock: FixedClock, runtime: Runtime
) -> None:
    """Rows written before the column existed hold null: the family's first session was
    created by its sign-in; once retention removed that row, the parent's own creation is
    the latest the sign-in can have been."""
    tokens = await sign_in(http)
    clock.advance(DAY)
    tokens = (await refresh(http, tokens["refreshToken"])).json()
    async with runtime.database.connection() as conn:
        await conn.execute("update identity.refresh_sessions set signed_in_at = null")
    clock.advance(DAY)
    tokens = (await refresh(http, tokens["refreshToken"])).json()
    assert _instant((await _claims(http, tokens))["auth_time"]) == T0

    async with runtime.database.connection() as conn:
        family_id = (await session_row(conn, tokens["sessionId"]))["family_id"]
        await conn.execute("update identity.refresh_sessions set signed_in_at = null")
        await conn.execute("delete from identity.refresh_sessions where id = $1", family_id)
    parent_created_at = T0 + 2 * DAY
    clock.advance(DAY)
    tokens = (await refresh(http, tokens["refreshToken"])).json()
    assert _instant((await _claims(http, tokens))["auth_time"]) == parent_created_at
    async with runtime.database.connection() as conn:
        row = await session_row(conn, tokens["sessionId"])
    assert (row["signed_in_at"], row["family_id"]) == (parent_created_at, family_id)
    assert uuid.UUID(tokens["userId"]) == row["user_id"]

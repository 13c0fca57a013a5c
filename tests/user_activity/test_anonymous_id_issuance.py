"""This context issues a device's AnonymousId at its first start: a start without
``X-Anonymous-Id`` gets a new one, and every start sent with the same ``Idempotency-Key``
within 24 hours — a retry after a lost answer, or one racing the first — gets the same id and
so the same session. An id the service never issued still works."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import httpx

from pin_sessions.platform.clock import FixedClock
from pin_sessions.platform.ids import new_id
from pin_sessions.platform.runtime import Runtime
from tests.user_activity.conftest import IPHONE, device

START = "/api/user-activity/sessions/start"


def first_start(key: str) -> dict[str, str]:
    """A first start as the tracker sends it: no device id yet, a key for its retries."""
    return {"User-Agent": IPHONE, "Idempotency-Key": key}


async def _sessions(runtime: Runtime) -> int:
    async with runtime.database.connection() as conn:
        count: int = await conn.fetchval("select count(*) from user_activity.sessions")
    return count


async def test_a_retried_first_start_gets_the_same_anonymous_id_and_session(
    http: httpx.AsyncClient, runtime: Runtime, clock: FixedClock
) -> None:
    first = await http.post(START, headers=first_start("tab-7f3a"))
    clock.advance(timedelta(hours=23, minutes=59))
    retried = await http.post(START, headers=first_start("tab-7f3a"))

    assert first.status_code == retried.status_code == 200, retried.text
    assert retried.json()["anonymousId"] == first.json()["anonymousId"]
    assert retried.json()["sessionId"] == first.json()["sessionId"]
    assert (first.json()["created"], retried.json()["created"]) == (True, False)
    assert await _sessions(runtime) == 1
    # The id is the device's from then on: sent back, it finds the same session.
    anonymous_id = first.json()["anonymousId"]
    again = await http.post(START, headers={"X-Anonymous-Id": anonymous_id, "User-Agent": IPHONE})
    assert again.json()["sessionId"] == first.json()["sessionId"]


async def test_first_starts_racing_with_one_key_make_one_device_and_one_session(
    api_url: str, runtime: Runtime
) -> None:
    # Real parallel requests over real HTTP, each on its own connection.
    async with httpx.AsyncClient(base_url=api_url, timeout=30) as client:
        answers = await asyncio.gather(
            *(client.post(START, headers=first_start("racing")) for _ in range(8))
        )
    assert {answer.status_code for answer in answers} == {200}
    assert len({answer.json()["anonymousId"] for answer in answers}) == 1
    assert len({answer.json()["sessionId"] for answer in answers}) == 1
    assert await _sessions(runtime) == 1


async def test_other_keys_no_key_and_an_expired_key_each_get_a_new_device(
    http: httpx.AsyncClient, runtime: Runtime, clock: FixedClock
) -> None:
    keyed = (await http.post(START, headers=first_start("k"))).json()["anonymousId"]
    other = (await http.post(START, headers=first_start("k2"))).json()["anonymousId"]
    unkeyed = [
        (await http.post(START, headers={"User-Agent": IPHONE})).json()["anonymousId"]
        for _ in range(2)
    ]
    clock.advance(timedelta(hours=24, seconds=1))
    expired = (await http.post(START, headers=first_start("k"))).json()["anonymousId"]
    assert len({keyed, other, *unkeyed, expired}) == 5


async def test_with_a_device_id_the_key_is_not_read_and_an_unissued_id_works(
    http: httpx.AsyncClient, runtime: Runtime
) -> None:
    """A device minted its own id before the service issued them: it keeps working."""
    own = new_id()
    started = await http.post(START, headers=device(own) | {"Idempotency-Key": "k"})
    assert started.status_code == 200
    assert started.json()["anonymousId"] == str(own)
    issued = (await http.post(START, headers=first_start("k"))).json()["anonymousId"]
    assert issued != str(own)
    async with runtime.database.connection() as conn:
        keys = await conn.fetch("select anonymous_id from user_activity.issued_anonymous_ids")
    assert [str(row["anonymous_id"]) for row in keys] == [issued]


async def test_a_malformed_key_on_a_first_start_is_refused_and_issues_nothing(
    http: httpx.AsyncClient, runtime: Runtime
) -> None:
    refused = await http.post(START, headers=first_start("x" * 65))
    assert (refused.status_code, refused.json()["code"]) == (
        400,
        "USER_ACTIVITY_IDEMPOTENCY_KEY_INVALID",
    )
    assert await _sessions(runtime) == 0

"""Idempotency-Key on POST /actions and /property-views (SPEC §8): a repeat with the same key
from the same device within 24 hours records nothing new and gets the first answer, also when
the repeats arrive at the same time."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

import httpx
import pytest

from pin_sessions.platform.clock import FixedClock
from pin_sessions.platform.ids import new_id
from pin_sessions.platform.runtime import Runtime
from tests.user_activity.conftest import device

ACTIONS = "/api/user-activity/actions"
VIEWS = "/api/user-activity/property-views"
PROPERTY = "0b7f8c3e-6a52-4c1e-9d1a-5f0c2a7e4b11"
BODIES = {
    ACTIONS: {"type": "favourite-added", "data": {"n": 1}},
    VIEWS: {"propertyObjectId": PROPERTY},
}
TABLES = {ACTIONS: "action_events", VIEWS: "property_object_views"}


def keyed(anonymous_id: uuid.UUID, key: str) -> dict[str, str]:
    return {**device(anonymous_id), "Idempotency-Key": key}


async def rows(runtime: Runtime, table: str) -> int:
    async with runtime.database.connection() as conn:
        count: int = await conn.fetchval(f"select count(*) from user_activity.{table}")
    return count


@pytest.mark.parametrize("path", [ACTIONS, VIEWS])
async def test_a_repeated_key_records_once_and_answers_as_the_first_time(
    http: httpx.AsyncClient, runtime: Runtime, clock: FixedClock, path: str
) -> None:
    anonymous_id = new_id()
    first = await http.post(path, headers=keyed(anonymous_id, "k-1"), json=BODIES[path])
    clock.advance(timedelta(hours=23, minutes=59))
    again = await http.post(path, headers=keyed(anonymous_id, "k-1"), json=BODIES[path])

    assert first.status_code == again.status_code == 201, again.text
    assert again.json() == first.json()
    assert await rows(runtime, TABLES[path]) == 1


@pytest.mark.parametrize("path", [ACTIONS, VIEWS])
async def test_repeats_arriving_at_the_same_time_record_once(
    api_url: str, runtime: Runtime, path: str
) -> None:
    anonymous_id = new_id()
    # Real parallel requests over real HTTP, each on its own connection and transaction.
    async with httpx.AsyncClient(base_url=api_url, timeout=30) as client:
        answers = await asyncio.gather(
            *(
                client.post(path, headers=keyed(anonymous_id, "same"), json=BODIES[path])
                for _ in range(8)
            )
        )
    assert {answer.status_code for answer in answers} == {201}
    assert len({answer.text for answer in answers}) == 1
    assert await rows(runtime, TABLES[path]) == 1


async def test_keys_are_per_device_and_absent_keys_change_nothing(
    http: httpx.AsyncClient, runtime: Runtime
) -> None:
    one, other = new_id(), new_id()
    body = BODIES[ACTIONS]
    assert (await http.post(ACTIONS, headers=keyed(one, "k"), json=body)).status_code == 201
    assert (await http.post(ACTIONS, headers=keyed(other, "k"), json=body)).status_code == 201
    for _ in range(2):
        assert (await http.post(ACTIONS, headers=device(one), json=body)).status_code == 201
    assert await rows(runtime, "action_events") == 4


async def test_a_key_older_than_24_hours_records_again(
    http: httpx.AsyncClient, runtime: Runtime, clock: FixedClock
) -> None:
    anonymous_id = new_id()
    first = await http.post(ACTIONS, headers=keyed(anonymous_id, "k"), json=BODIES[ACTIONS])
    clock.advance(timedelta(hours=24, seconds=1))
    later = await http.post(ACTIONS, headers=keyed(anonymous_id, "k"), json=BODIES[ACTIONS])
    assert later.status_code == 201
    assert later.json()["actionId"] != first.json()["actionId"]
    assert await rows(runtime, "action_events") == 2


async def test_the_same_key_with_another_request_is_refused_and_records_nothing(
    http: httpx.AsyncClient, runtime: Runtime
) -> None:
    anonymous_id = new_id()
    headers = keyed(anonymous_id, "k")
    assert (await http.post(ACTIONS, headers=headers, json=BODIES[ACTIONS])).status_code == 201
    other_body = await http.post(ACTIONS, headers=headers, json={"type": "something-else"})
    other_route = await http.post(VIEWS, headers=headers, json=BODIES[VIEWS])
    for refused in (other_body, other_route):
        assert refused.status_code == 422
        assert refused.json()["code"] == "USER_ACTIVITY_IDEMPOTENCY_KEY_REUSED"
    assert await rows(runtime, "action_events") == 1
    assert await rows(runtime, "property_object_views") == 0


# Spaces around a key are trimmed as any header's (SPEC §11): " " is an empty key.
@pytest.mark.parametrize("key", ["", " ", "a" * 65, "ключ", "tab\there"])
async def test_a_malformed_key_is_a_400_and_records_nothing(
    http: httpx.AsyncClient, runtime: Runtime, key: str
) -> None:
    response = await http.post(
        ACTIONS,
        headers=[
            *((name.encode(), value.encode()) for name, value in device(new_id()).items()),
            (b"Idempotency-Key", key.encode()),
        ],
        json=BODIES[ACTIONS],
    )
    assert response.status_code == 400
    assert response.json()["code"] == "USER_ACTIVITY_IDEMPOTENCY_KEY_INVALID"
    assert await rows(runtime, "action_events") == 0


@pytest.mark.parametrize("key", ["a", "a" * 64, "with inner space", "!~{}"])
async def test_keys_of_1_to_64_printable_characters_are_accepted(
    http: httpx.AsyncClient, key: str
) -> None:
    response = await http.post(ACTIONS, headers=keyed(new_id(), key), json=BODIES[ACTIONS])
    assert response.status_code == 201, response.text

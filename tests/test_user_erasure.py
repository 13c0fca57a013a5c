"""SPEC §10 across the three contexts, on the built-in bus with every consumer running.

A user signs in on a device, acts, has a session closed and counted by dev-stats, then
erases the account. Once every context has applied it, no table of any schema holds the
user id (but ``identity.erasures``) or the phone number. The operator's CLI does the same
by phone number, and exports first.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry

from pin_sessions.bootstrap.delivery import build_delivery_roles
from pin_sessions.platform.clock import FixedClock
from pin_sessions.platform.ids import new_id
from pin_sessions.platform.runtime import Runtime
from tests.identity.flows import bearer, confirm, dev_code, new_phone, request_code
from tests.support.processes import communicate, pin_sessions
from tests.support.waiting import wait_until
from tests.user_activity.conftest import device
from tests.user_activity.jobs.support import close_once

ERASURE_CONSUMERS = ("user-activity-user-erased", "dev-stats-user-erased")

EVERY_TABLE = """
select table_schema, table_name from information_schema.tables
where table_type = 'BASE TABLE'
  and table_schema not in ('pg_catalog', 'information_schema')
order by table_schema, table_name
"""


@pytest.fixture
def settings_env(settings_env: dict[str, str]) -> dict[str, str]:
    return {**settings_env, "PIN_DEV_CODES": "1"}


@pytest.fixture
async def delivery(runtime: Runtime) -> AsyncIterator[None]:
    """Every consumer of the service on the PostgreSQL bus, as ``up`` runs them."""
    stop = asyncio.Event()
    roles = build_delivery_roles(runtime)
    tasks = [asyncio.create_task(role.run(stop)) for role in roles]
    try:
        yield
    finally:
        stop.set()
        await asyncio.gather(*tasks)


async def _sign_in(http: httpx.AsyncClient, phone: str, anonymous_id: uuid.UUID) -> Any:
    request_id = await request_code(http, phone)
    response = await confirm(
        http,
        request_id,
        await dev_code(http, request_id),
        headers={"X-Anonymous-Id": str(anonymous_id)},
    )
    assert response.status_code == 200, response.text
    return response.json()


async def _a_users_life(
    http: httpx.AsyncClient, runtime: Runtime, clock: FixedClock, phone: str
) -> str:
    """Sign in on two devices, act, let one session be closed and counted; the user id."""
    laptop, phone_device = new_id(), new_id()
    tokens = await _sign_in(http, phone, laptop)
    user = {**device(laptop), **bearer(tokens)}
    assert (await http.post("/api/user-activity/sessions/start", headers=user)).status_code == 200
    action = {"type": "favorites.add", "data": {"note": "a flat"}}
    assert (
        await http.post("/api/user-activity/actions", headers=user, json=action)
    ).status_code == 201
    clock.advance(timedelta(minutes=20))

    async def laptop_closed() -> bool:
        # The closer skips a session another transaction holds (SKIP LOCKED): here the
        # signed-in consumer linking the laptop's sign-in, if it runs at this moment. The
        # service's closer comes back on its next pass; so does the test.
        await close_once(runtime, CollectorRegistry())
        async with runtime.database.connection() as conn:
            status = await conn.fetchval(
                "select status from user_activity.sessions where anonymous_id = $1", laptop
            )
        return bool(status == "Inactive")

    await wait_until(laptop_closed, timeout=60)
    # The phone browses as a guest, then signs in: the sign-in event links the session the
    # view started (signed in first, the event could be consumed before that session existed).
    view = {"propertyObjectId": str(new_id())}
    response = await http.post(
        "/api/user-activity/property-views", headers={**device(phone_device)}, json=view
    )
    assert response.status_code == 201
    await _sign_in(http, phone, phone_device)
    user_id: str = tokens["userId"]

    async def counted_and_linked() -> bool:
        async with runtime.database.connection() as conn:
            facts = await conn.fetchval(
                "select count(*) from dev_stats.session_facts where user_id = $1::uuid", user_id
            )
            linked = await conn.fetchval(
                "select count(*) from user_activity.sessions where user_id = $1::uuid", user_id
            )
        return bool(facts == 1 and linked == 2)

    await wait_until(counted_and_linked, timeout=60)
    return user_id


async def _applied_everywhere(runtime: Runtime, user_id: str) -> None:
    async def applied() -> bool:
        async with runtime.database.connection() as conn:
            message_id = await conn.fetchval(
                "select message_id from identity.erasures where user_id = $1::uuid", user_id
            )
            done = await conn.fetchval(
                "select count(*) from messaging.processed_messages "
                "where message_id = $1 and consumer = any($2::text[])",
                message_id,
                list(ERASURE_CONSUMERS),
            )
            # The bus deletes what every consumer has passed: the events that named the user.
            left = await conn.fetchval("select count(*) from messaging.outbox")
        return bool(done == len(ERASURE_CONSUMERS) and left == 0)

    await wait_until(applied, timeout=60)


async def _tables_holding(runtime: Runtime, text: str) -> list[str]:
    async with runtime.database.connection() as conn:
        found = []
        for row in await conn.fetch(EVERY_TABLE):
            table = f'"{row["table_schema"]}"."{row["table_name"]}"'
            count = await conn.fetchval(
                f"select count(*) from {table} as t where t::text like '%' || $1 || '%'",
                text,
            )
            if count:
                found.append(f"{row['table_schema']}.{row['table_name']}")
    return found


async def test_after_an_erasure_no_table_holds_the_user_id_or_the_phone(
    http: httpx.AsyncClient, runtime: Runtime, clock: FixedClock, delivery: None
) -> None:
    phone = new_phone()
    user_id = await _a_users_life(http, runtime, clock, phone)
    # The scan does find what is there.
    assert "dev_stats.session_facts" in await _tables_holding(runtime, user_id)
    assert "identity.users" in await _tables_holding(runtime, phone)
    fresh = await _sign_in(http, phone, new_id())

    response = await http.delete("/api/identity/me", headers=bearer(fresh))

    assert response.status_code == 204, response.text
    await _applied_everywhere(runtime, user_id)
    assert await _tables_holding(runtime, user_id) == ["identity.erasures"]
    assert await _tables_holding(runtime, phone) == []
    async with runtime.database.connection() as conn:
        facts = await conn.fetchval("select count(*) from dev_stats.session_facts")
    assert facts == 1  # counted still, without the user


async def test_the_operator_exports_then_erases_by_phone_number(
    http: httpx.AsyncClient,
    runtime: Runtime,
    clock: FixedClock,
    delivery: None,
    settings_env: dict[str, str],
) -> None:
    phone = new_phone()
    user_id = await _a_users_life(http, runtime, clock, phone)

    export = pin_sessions("users", "export", "--phone", phone, env=settings_env)
    out, err = await communicate(export)
    assert export.returncode == 0, err
    document = json.loads(out)
    assert document["userId"] == user_id
    assert document["identity"]["phoneNumber"] == phone
    assert len(document["userActivity"]["sessions"]) == 2
    [action] = [
        action for session in document["userActivity"]["sessions"] for action in session["actions"]
    ]
    assert action["data"] == {"note": "a flat"}

    erase = pin_sessions("users", "erase", "--phone", phone, env=settings_env)
    out, err = await communicate(erase)
    assert erase.returncode == 0, err
    first, *applied = [json.loads(line) for line in out.splitlines()]
    assert first["userId"] == user_id
    assert sorted(line["context"] for line in applied) == ["dev-stats", "user-activity"]
    await _applied_everywhere(runtime, user_id)
    assert await _tables_holding(runtime, user_id) == ["identity.erasures"]
    async with runtime.database.connection() as conn:
        requested_by = await conn.fetchval("select requested_by from identity.erasures")
    assert requested_by == "operator"

    for command in ("export", "erase"):
        again = pin_sessions("users", command, "--phone", phone, env=settings_env)
        out, err = await communicate(again)
        assert again.returncode == 1
        assert err.strip().splitlines() == ["pin-sessions: no user has this phone number"]

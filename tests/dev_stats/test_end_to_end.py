"""Sign in on a guest device → its session linked by the identity-signed-in consumer → closed
by the activity closer → counted by the dev-stats summary with its duration (issue scenario);
and the same device when that consumer catches up only after a second user took it.

Everything runs for real on the built-in PostgreSQL bus; only the clock is moved by the test.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

import httpx
import pytest

from pin_sessions.bootstrap.identity import build_token_signer
from pin_sessions.bootstrap.jobs import JOB_WORKERS
from pin_sessions.dev_stats.consumers import SessionEndedConsumer
from pin_sessions.platform.clock import FixedClock
from pin_sessions.platform.messaging.metrics import MessagingMetrics
from pin_sessions.platform.messaging.pgbus import PostgresBusConsumer
from pin_sessions.platform.messaging.runner import ConsumerRunner, Handler
from pin_sessions.platform.runtime import Runtime
from pin_sessions.user_activity.consumers import SignedInConsumer
from tests.conftest import T0
from tests.identity.flows import bearer, confirm, dev_code, new_phone, request_code
from tests.support.users import signed_in_user


@pytest.fixture
def settings_env(settings_env: dict[str, str]) -> dict[str, str]:
    return {**settings_env, "PIN_DEV_CODES": "1"}


async def _deliver(runtime: Runtime, metrics: MessagingMetrics, handler: Handler) -> None:
    runner = ConsumerRunner(handler, runtime.database, runtime.clock, metrics)
    await PostgresBusConsumer(runner, runtime.database, runtime.clock, metrics).run_once(
        runtime.clock.now()
    )


async def _sign_in_on(http: httpx.AsyncClient, device: dict[str, str]) -> dict[str, str]:
    request_id = await request_code(http, new_phone())
    signed_in = await confirm(http, request_id, await dev_code(http, request_id), headers=device)
    assert signed_in.status_code == 200, signed_in.text
    tokens: dict[str, str] = signed_in.json()
    return tokens


async def _summary(runtime: Runtime, http: httpx.AsyncClient) -> dict[str, object]:
    async with runtime.database.transaction() as conn:
        viewer = await signed_in_user(
            conn,
            build_token_signer(runtime),
            now=runtime.clock.now(),
            permissions=["dev-stats.view"],
        )
    summary = await http.get(
        "/api/dev-stats/sessions/summary",
        params={"from": T0.date().isoformat()},
        headers=viewer.headers,
    )
    assert summary.status_code == 200, summary.text
    body: dict[str, object] = summary.json()
    return body


async def test_a_signed_in_device_session_is_linked_closed_and_counted_with_its_duration(
    runtime: Runtime, http: httpx.AsyncClient, clock: FixedClock
) -> None:
    metrics = MessagingMetrics.register(runtime.registry)
    device = {"X-Anonymous-Id": str(uuid.uuid4())}
    started = await http.post("/api/user-activity/sessions/start", headers=device)
    assert started.status_code == 200, started.text
    session_id = started.json()["sessionId"]

    clock.advance(timedelta(minutes=4))
    request_id = await request_code(http, new_phone())
    signed_in = await confirm(http, request_id, await dev_code(http, request_id), headers=device)
    assert signed_in.status_code == 200, signed_in.text
    user = signed_in.json()
    await _deliver(runtime, metrics, SignedInConsumer(runtime.registry))
    async with runtime.database.connection() as conn:
        linked_to = await conn.fetchval(
            "select user_id from user_activity.sessions where id = $1", uuid.UUID(session_id)
        )
    assert str(linked_to) == user["userId"]

    clock.advance(timedelta(minutes=1))
    beat = await http.post(
        "/api/user-activity/sessions/heartbeat",
        headers={**device, "Authorization": f"Bearer {user['accessToken']}"},
    )
    assert beat.status_code == 200, beat.text
    assert beat.json()["sessionId"] == session_id

    clock.advance(timedelta(minutes=30))
    closer = JOB_WORKERS["activity-closer"](runtime)
    assert await closer.run_pass(asyncio.Event()) is not None
    await _deliver(runtime, metrics, SessionEndedConsumer())

    body = await _summary(runtime, http)
    assert (body["sessions"], body["userSessions"], body["guestSessions"]) == (1, 1, 0)
    assert body["avgDurationSeconds"] == 300.0  # 4 min before sign-in + 1 min after


async def test_sign_ins_consumed_after_another_user_took_the_device_leave_one_session(
    runtime: Runtime, http: httpx.AsyncClient, clock: FixedClock
) -> None:
    """SPEC §6 late events, the issue's reproduction: counted 3 sessions where there was 1.

    A signs in on a guest device, then B; B's client links the guest session to B. Only
    then does identity-signed-in catch up with both sign-ins: A's is older than B's link, so
    it is stale and closes nothing; B's is B's own.
    """
    metrics = MessagingMetrics.register(runtime.registry)
    device = {"X-Anonymous-Id": str(uuid.uuid4())}
    started = await http.post("/api/user-activity/sessions/start", headers=device)
    session_id = started.json()["sessionId"]
    clock.advance(timedelta(minutes=1))
    await _sign_in_on(http, device)
    clock.advance(timedelta(minutes=1))
    second = await _sign_in_on(http, device)
    b_link = await http.post(
        "/api/user-activity/sessions/link", headers={**device, **bearer(second)}
    )
    assert (b_link.json()["sessionId"], b_link.json()["userId"]) == (
        session_id,
        second["userId"],
    )
    await http.post("/api/user-activity/sessions/heartbeat", headers=device)

    clock.advance(timedelta(minutes=3))
    await _deliver(runtime, metrics, SignedInConsumer(runtime.registry))
    async with runtime.database.connection() as conn:
        rows = await conn.fetch(
            "select id, status, user_id from user_activity.sessions where anonymous_id = $1",
            uuid.UUID(device["X-Anonymous-Id"]),
        )
    assert [(str(r["id"]), r["status"], str(r["user_id"])) for r in rows] == [
        (session_id, "Active", second["userId"])
    ]
    assert runtime.registry.get_sample_value("user_activity_stale_sign_ins_total") == 1

    clock.advance(timedelta(minutes=30))
    closer = JOB_WORKERS["activity-closer"](runtime)
    assert await closer.run_pass(asyncio.Event()) is not None
    await _deliver(runtime, metrics, SessionEndedConsumer())
    body = await _summary(runtime, http)
    assert (body["sessions"], body["userSessions"], body["guestSessions"]) == (1, 1, 0)
    assert body["avgDurationSeconds"] == 120.0  # started at T0, B's heartbeat 2 min later

"""Sign in on a guest device → its session linked by the identity-signed-in consumer → closed
by the activity closer → counted by the dev-stats summary with its duration (issue scenario).

Everything runs for real on the built-in PostgreSQL bus; only the clock is moved by the test.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

import httpx
import pytest

from pin_sessions.bootstrap import JOB_WORKERS, build_token_codec
from pin_sessions.dev_stats.consumers import SessionEndedConsumer
from pin_sessions.platform.clock import FixedClock
from pin_sessions.platform.messaging.metrics import MessagingMetrics
from pin_sessions.platform.messaging.pgbus import PostgresBusConsumer
from pin_sessions.platform.messaging.runner import ConsumerRunner, Handler
from pin_sessions.platform.runtime import Runtime
from pin_sessions.user_activity.consumers import SignedInConsumer
from tests.conftest import T0
from tests.identity.flows import confirm, dev_code, new_phone, request_code
from tests.support.users import signed_in_user


@pytest.fixture
def settings_env(settings_env: dict[str, str]) -> dict[str, str]:
    return {**settings_env, "PIN_DEV_CODES": "1"}


async def _deliver(runtime: Runtime, metrics: MessagingMetrics, handler: Handler) -> None:
    runner = ConsumerRunner(handler, runtime.database, runtime.clock, metrics)
    await PostgresBusConsumer(runner, runtime.database, runtime.clock, metrics).run_once(
        runtime.clock.now()
    )


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
    await _deliver(runtime, metrics, SignedInConsumer())
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

    async with runtime.database.transaction() as conn:
        viewer = await signed_in_user(
            conn, build_token_codec(runtime), now=clock.now(), permissions=["dev-stats.view"]
        )
    summary = await http.get(
        "/api/dev-stats/sessions/summary",
        params={"from": T0.date().isoformat()},
        headers=viewer.headers,
    )
    assert summary.status_code == 200, summary.text
    body = summary.json()
    assert (body["sessions"], body["userSessions"], body["guestSessions"]) == (1, 1, 0)
    assert body["avgDurationSeconds"] == 300.0  # 4 min before sign-in + 1 min after

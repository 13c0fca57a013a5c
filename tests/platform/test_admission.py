"""Bounded work per process: past PIN_HTTP__MAX_CONCURRENT_REQUESTS, a 503 before any work.

Over real HTTP against a live API with a bound of two, with two real requests held at work
(each waiting for a session row another transaction holds): the third is answered 503
``SERVICE_UNAVAILABLE`` with ``Retry-After`` at once and nothing of it is done — a refresh
turned away rotates nothing, so its retry, once there is room, is the first attempt again
and gets its successor instead of revoking the family as reuse (the soak's finding: a
refresh retried after the reuse interval under overload). The probes are answered whatever
the load, and a client trickling its body takes no place while it does.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager

import asyncpg
import httpx
from prometheus_client import CollectorRegistry

from pin_sessions.bootstrap.api import build_api
from pin_sessions.bootstrap.database import build_runtime
from pin_sessions.platform.clock import FixedClock
from pin_sessions.settings import load_settings
from tests.identity.flows import sign_in
from tests.support.http import LiveServer
from tests.support.raw_http import RawConnection
from tests.support.waiting import wait_until

START = "/api/user-activity/sessions/start"
HEARTBEAT = "/api/user-activity/sessions/heartbeat"
ACTIONS = "/api/user-activity/actions"
REFRESH = "/api/identity/sessions/refresh"
WAITING_ACTIONS = """
select count(*) from pg_stat_activity
where datname = current_database() and wait_event_type = 'Lock'
  and query like '%insert into user_activity.sessions%'
"""
REFRESH_SESSION = "select status from identity.refresh_sessions where id = $1"


@contextmanager
def _api(
    settings_env: dict[str, str], clock: FixedClock, limit: int, registry: CollectorRegistry
) -> Iterator[tuple[LiveServer, str]]:
    env = {**settings_env, "PIN_DEV_CODES": "1", "PIN_HTTP__MAX_CONCURRENT_REQUESTS": str(limit)}
    settings = load_settings(env)
    runtime = build_runtime(settings, env["PIN_DATABASE_URL"], clock=clock, registry=registry)
    server = LiveServer(build_api(runtime))
    with server as url:
        yield server, url


@asynccontextmanager
async def _row_locked(dsn: str, anonymous_id: str) -> AsyncIterator[None]:
    """Hold the device's session row, as a long transaction elsewhere would."""
    holder = await asyncpg.connect(dsn)
    try:
        async with holder.transaction():
            await holder.execute(
                "select id from user_activity.sessions where anonymous_id = $1 for update",
                uuid.UUID(anonymous_id),
            )
            yield
    finally:
        await holder.close()


async def _send_action(url: str, device: str) -> RawConnection:
    """An action sent on a connection of its own (its answer read later)."""
    connection = await RawConnection.open(url)
    await connection.send(
        "POST", ACTIONS, body=b'{"type": "viewed"}',
        headers={"Content-Type": "application/json", "X-Anonymous-Id": device},
    )  # fmt: skip
    return connection


async def test_past_its_bound_a_refresh_is_turned_away_unstarted_and_its_retry_is_not_reuse(
    settings_env: dict[str, str], database_url: str, clock: FixedClock
) -> None:
    registry = CollectorRegistry()
    with _api(settings_env, clock, 2, registry) as (_server, url):
        async with httpx.AsyncClient(base_url=url) as client:
            tokens = await sign_in(client)
            device = (await client.post(START)).json()["anonymousId"]
            monitor = await asyncpg.connect(database_url)
            try:
                async with _row_locked(database_url, device):
                    # Two actions at work, each waiting for the row: the process's bound.
                    held = [await _send_action(url, device) for _ in range(2)]

                    async def both_waiting() -> bool:
                        return bool(await monitor.fetchval(WAITING_ACTIONS) == 2)

                    await wait_until(both_waiting, timeout=20)
                    refresh = {"refreshToken": tokens["refreshToken"]}
                    turned_away = await client.post(REFRESH, json=refresh)
                    heartbeat = await client.post(HEARTBEAT, headers={"X-Anonymous-Id": device})
                    probes = [(await client.get(p)).status_code for p in ("/healthz", "/readyz")]
                    meanwhile = await monitor.fetchval(
                        REFRESH_SESSION, uuid.UUID(tokens["sessionId"])
                    )
                held_answers = [(await connection.response()).status for connection in held]
                for connection in held:
                    await connection.close()
            finally:
                await monitor.close()
            retried = await client.post(REFRESH, json=refresh)

    assert turned_away.status_code == 503, turned_away.text
    assert turned_away.headers["content-type"] == "application/problem+json"
    assert turned_away.json()["code"] == "SERVICE_UNAVAILABLE"
    assert turned_away.headers["retry-after"] == "1"
    assert heartbeat.status_code == 503  # the fast path shares the bound
    assert registry.get_sample_value("pin_http_requests_shed_total") == 2
    shed = {"method": "POST", "route": "shed", "status": "503"}
    assert registry.get_sample_value("pin_http_requests_total", shed) == 2
    assert probes == [200, 200]
    assert meanwhile == "Active"  # nothing of the refresh was done: no rotation
    assert held_answers == [201, 201]
    # The retry is the first attempt: a successor, not reuse (401, the family revoked).
    assert retried.status_code == 200, retried.text
    assert retried.json()["userId"] == tokens["userId"]


async def test_a_client_trickling_its_body_takes_no_place_in_the_bound(
    settings_env: dict[str, str], clock: FixedClock
) -> None:
    with _api(settings_env, clock, 1, CollectorRegistry()) as (server, url):
        async with httpx.AsyncClient(base_url=url) as client:
            device = (await client.post(START)).json()["anonymousId"]
            trickling = []
            # Through the framework and through the fast path (the heartbeat, read in step).
            for path in (ACTIONS, HEARTBEAT):
                connection = await RawConnection.open(url)
                await connection.write(
                    f"POST {path} HTTP/1.1\r\nHost: test\r\nX-Anonymous-Id: {device}\r\n"
                    "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n"
                    '{"type": "'.encode()
                )
                trickling.append(connection)
            try:
                await wait_until(lambda: server.requests_begun() == 2, timeout=20)
                answers = [
                    (await client.post(HEARTBEAT, headers={"X-Anonymous-Id": device})).status_code,
                    (await client.post(ACTIONS, json={"type": "viewed"},
                                       headers={"X-Anonymous-Id": device})).status_code,
                ]  # fmt: skip
                # The trickling two are still waiting for their bodies, unanswered.
                await wait_until(lambda: server.requests_begun() == 2, timeout=20)
            finally:
                for connection in trickling:
                    await connection.close()

    assert answers == [200, 201]

"""Every database call of the API is bounded (SPEC §9), measured against a real PostgreSQL.

A statement past ``PIN_DATABASE__STATEMENT_TIMEOUT``, a pool with no connection free
within ``PIN_DATABASE__ACQUIRE_TIMEOUT``, a server that answers nothing at all: each is a
503 ``SERVICE_UNAVAILABLE`` problem at once, never a request held for as long as the
stall lasts. And a client that hangs up cancels its query.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from datetime import timedelta
from pathlib import Path

import asyncpg
import httpx
import pytest
from prometheus_client import CollectorRegistry

from pin_sessions.bootstrap.api import build_api
from pin_sessions.bootstrap.database import build_runtime
from pin_sessions.platform.clock import FixedClock
from pin_sessions.platform.database import Connection
from pin_sessions.platform.embedded import EmbeddedPostgres
from pin_sessions.platform.runtime import Runtime
from pin_sessions.settings import load_settings
from tests.conftest import LogCapture
from tests.support.http import LiveServer
from tests.support.raw_http import RawConnection
from tests.support.stall import frozen, own_postgres
from tests.support.waiting import wait_until

HEARTBEAT = "/api/user-activity/sessions/heartbeat"
START = "/api/user-activity/sessions/start"
HISTORY = "/api/user-activity/sessions"

ACTIONS = "/api/user-activity/actions"
WAITING_ACTIONS = """
select count(*) from pg_stat_activity
where datname = current_database() and wait_event_type = 'Lock'
  and query like '%insert into user_activity.sessions%'
"""


@contextmanager
def _api(
    settings_env: dict[str, str], dsn: str, clock: FixedClock, **database: str
) -> Iterator[str]:
    env = {**settings_env, "PIN_DATABASE_URL": dsn}
    env.update({f"PIN_DATABASE__{name.upper()}": value for name, value in database.items()})
    runtime = build_runtime(load_settings(env), dsn, clock=clock, registry=CollectorRegistry())
    with LiveServer(build_api(runtime)) as url:
        yield url


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


async def _started_device(url: str) -> str:
    async with httpx.AsyncClient(base_url=url) as client:
        started = await client.post(START)
    assert started.status_code == 200, started.text
    anonymous_id: str = started.json()["anonymousId"]
    return anonymous_id


async def test_a_statement_past_the_statement_timeout_is_a_503_problem(
    settings_env: dict[str, str], database_url: str, clock: FixedClock
) -> None:
    with _api(settings_env, database_url, clock, statement_timeout="0.3") as url:
        device = await _started_device(url)
        async with _row_locked(database_url, device), httpx.AsyncClient(base_url=url) as client:
            response = await client.post(HEARTBEAT, headers={"X-Anonymous-Id": device})

    assert response.status_code == 503, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["code"] == "SERVICE_UNAVAILABLE"


async def test_a_client_that_hangs_up_cancels_its_query(
    settings_env: dict[str, str],
    database_url: str,
    clock: FixedClock,
    runtime: Runtime,
    captured_logs: LogCapture,
) -> None:
    # A statement timeout far beyond the test: only the cancellation can end the query.
    with _api(settings_env, database_url, clock, statement_timeout="600") as url:
        device = await _started_device(url)
        clock.advance(timedelta(minutes=1))
        async with _row_locked(database_url, device):
            connection = await RawConnection.open(url)
            # Recording an action extends the device's session first: it waits for the row.
            await connection.send(
                "POST",
                ACTIONS,
                body=b'{"type": "viewed"}',
                headers={
                    "Content-Type": "application/json",
                    "X-Anonymous-Id": device,
                    "X-Request-Id": device,
                },
            )
            async with runtime.database.connection() as conn:
                await wait_until(lambda: _count(conn, WAITING_ACTIONS, 1), timeout=20)
                await connection.close()
                await wait_until(lambda: _count(conn, WAITING_ACTIONS, 0), timeout=20)
        async with runtime.database.connection() as conn:
            recorded = await conn.fetchval("select count(*) from user_activity.action_events")
            last_activity = await conn.fetchval(
                "select last_activity_at from user_activity.sessions where anonymous_id = $1",
                uuid.UUID(device),
            )

    # The request was abandoned whole: the lock's release let none of it through.
    assert recorded == 0
    assert last_activity == clock.now() - timedelta(minutes=1)

    def recorded_as_gone() -> bool:
        lines = [json.loads(line) for line in captured_logs.lines()]
        return any(
            line.get("requestId") == device
            and line.get("event") == "http request"
            and line.get("status") == 499
            for line in lines
        )

    await wait_until(recorded_as_gone, timeout=10)


async def _count(conn: Connection, query: str, expected: int) -> bool:
    return bool(await conn.fetchval(query) == expected)


@pytest.fixture
def frozen_server(tmp_path: Path) -> Iterator[tuple[str, EmbeddedPostgres]]:
    """A PostgreSQL of this test's own: freezing the shared one would stall other tests."""
    with own_postgres(tmp_path) as server:
        yield server


async def test_a_frozen_database_holds_no_request_longer_than_its_bounds_and_recovers_by_itself(
    frozen_server: tuple[str, EmbeddedPostgres],
    settings_env: dict[str, str],
    clock: FixedClock,
) -> None:
    dsn, embedded = frozen_server
    bounds = {"statement_timeout": "1", "acquire_timeout": "0.5", "pool_max": "3"}
    with _api(settings_env, dsn, clock, **bounds) as url:
        devices = [await _started_device(url) for _ in range(3)]
        with frozen(embedded):
            async with httpx.AsyncClient(base_url=url, timeout=60) as client:

                async def timed(request: httpx.Request) -> tuple[float, httpx.Response]:
                    started = time.monotonic()
                    response = await client.send(request)
                    return time.monotonic() - started, response

                requests = [
                    *(
                        client.build_request("POST", HEARTBEAT, headers={"X-Anonymous-Id": d})
                        for d in devices * 2
                    ),
                    *(
                        client.build_request("GET", HISTORY, headers={"X-Anonymous-Id": d})
                        for d in devices
                    ),
                    client.build_request("POST", START),
                ]
                # The stall outlasts every bound many times over: an answer that waited for
                # the thaw would take the whole minute.
                answers = await asyncio.wait_for(
                    asyncio.gather(*(timed(request) for request in requests)), timeout=60
                )

        slowest = max(elapsed for elapsed, _ in answers)
        print(f"frozen database: {len(answers)} requests, slowest answer {slowest:.2f} s")
        assert [response.status_code for _, response in answers] == [503] * len(requests)
        assert {response.json()["code"] for _, response in answers} == {"SERVICE_UNAVAILABLE"}
        # Bound: statement timeout (1 s) + client grace (1 s) + acquire (0.5 s); the rest is
        # margin for a loaded machine, far below the stall.
        assert slowest < 10

        async with httpx.AsyncClient(base_url=url) as client:

            async def recovered() -> bool:
                response = await client.post(HEARTBEAT, headers={"X-Anonymous-Id": devices[0]})
                return response.status_code == 200

            await wait_until(recovered, timeout=30)

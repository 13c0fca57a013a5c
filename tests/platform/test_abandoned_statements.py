"""A statement the client gave up on, on a backend that cannot acknowledge its cancellation.

A backend stopped dead (SIGSTOP: a stuck host, a starved machine) neither finishes its
statement nor answers the cancel request asyncpg sends for it. asyncpg then gives up on
the connection itself, closes it and hands it back to the pool: by the time our code
closes the abandoned connection, there may be nothing left to close. That must be taken
as done — never an error of its own (it was a 500 on a request whose client had hung up,
found by the soak) — and a request still waiting must get its 503 within its one bound,
not after a second wait for a cancellation that will not come.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path

import asyncpg
import httpx
import pytest
from prometheus_client import CollectorRegistry

from pin_sessions.bootstrap.api import build_api
from pin_sessions.bootstrap.database import build_runtime
from pin_sessions.platform.clock import FixedClock
from pin_sessions.platform.database import Bounds, Database
from pin_sessions.platform.embedded import EmbeddedPostgres
from pin_sessions.platform.errors import ServiceUnavailable
from pin_sessions.settings import load_settings
from tests.conftest import LogCapture
from tests.support.http import LiveServer
from tests.support.raw_http import RawConnection
from tests.support.stall import backends_freezer, own_postgres
from tests.support.waiting import wait_until

# Each test starts a PostgreSQL of its own (a process the marker's reading does not see).
pytestmark = pytest.mark.e2e

STATEMENT_TIMEOUT = 3.0
# One call's bound (SPEC §11): the statement timeout and the client's second of grace.
BOUND = STATEMENT_TIMEOUT + 1.0
# For a loaded machine; waiting for the cancellation too would cost a whole bound more.
MARGIN = 2.5

START = "/api/user-activity/sessions/start"
ACTIONS = "/api/user-activity/actions"
WAITING_ACTION = """
select pid from pg_stat_activity
where datname = current_database() and wait_event_type = 'Lock'
  and query like '%insert into user_activity.sessions%'
"""


@pytest.fixture
def own_server(tmp_path: Path) -> Iterator[tuple[str, EmbeddedPostgres]]:
    """A PostgreSQL of this test's own: its backends are the ones stopped."""
    with own_postgres(tmp_path) as server:
        yield server


async def test_a_statement_whose_backend_stops_is_a_503_within_one_bound_and_the_pool_goes_on(
    own_server: tuple[str, EmbeddedPostgres],
) -> None:
    dsn, _ = own_server
    bounds = Bounds(timedelta(seconds=STATEMENT_TIMEOUT), timedelta(seconds=1))
    database = Database(dsn, max_size=2, bounds=bounds)
    await database.open()
    started = time.monotonic()

    async def stuck_statement(freeze: Callable[[int], None]) -> None:
        nonlocal started
        async with database.transaction() as conn:
            freeze(await conn.fetchval("select pg_backend_pid()"))
            started = time.monotonic()
            await conn.execute("select 1")

    try:
        with backends_freezer() as freeze:
            with pytest.raises(ServiceUnavailable):
                await stuck_statement(freeze)
            elapsed = time.monotonic() - started
        async with database.transaction() as conn:
            assert await conn.fetchval("select 1") == 1
    finally:
        await database.close()

    print(f"stopped backend: 503 after {elapsed:.2f} s (bound {BOUND} s)")
    assert elapsed < BOUND + MARGIN


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


async def test_a_client_that_hangs_up_on_a_statement_that_cannot_be_cancelled_is_gone_not_a_500(
    own_server: tuple[str, EmbeddedPostgres],
    settings_env: dict[str, str],
    clock: FixedClock,
    captured_logs: LogCapture,
) -> None:
    dsn, _ = own_server
    env = {
        **settings_env,
        "PIN_DATABASE_URL": dsn,
        "PIN_DATABASE__STATEMENT_TIMEOUT": str(STATEMENT_TIMEOUT),
    }
    runtime = build_runtime(load_settings(env), dsn, clock=clock, registry=CollectorRegistry())
    request_id = uuid.uuid4().hex
    with LiveServer(build_api(runtime)) as url, backends_freezer() as freeze:
        async with httpx.AsyncClient(base_url=url) as client:
            device = (await client.post(START)).json()["anonymousId"]
        monitor = await asyncpg.connect(dsn)
        try:
            async with _row_locked(dsn, device):
                connection = await RawConnection.open(url)
                # Recording an action extends the device's session first: it waits for the
                # row, on a backend then stopped before the statement timeout ends the wait.
                await connection.send(
                    "POST",
                    ACTIONS,
                    body=b'{"type": "viewed"}',
                    headers={
                        "Content-Type": "application/json",
                        "X-Anonymous-Id": device,
                        "X-Request-Id": request_id,
                    },
                )
                pids: list[int] = []

                async def waiting() -> bool:
                    pids.extend(row["pid"] for row in await monitor.fetch(WAITING_ACTION))
                    return bool(pids)

                await wait_until(waiting, timeout=STATEMENT_TIMEOUT / 2, interval=0.01)
                freeze(pids[0])
                await connection.close()

                def outcome() -> list[dict[str, object]]:
                    lines = [json.loads(line) for line in captured_logs.lines()]
                    return [line for line in lines if line.get("requestId") == request_id]

                await wait_until(
                    lambda: any(line.get("event") == "http request" for line in outcome()),
                    timeout=3 * BOUND,
                )
        finally:
            await monitor.close()

    [recorded] = [line for line in outcome() if line.get("event") == "http request"]
    assert recorded["status"] == 499, outcome()
    assert not [line for line in outcome() if line.get("level") == "error"], outcome()

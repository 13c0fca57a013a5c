"""A heartbeat batch never waits on a row lock (SPEC §11): real locks, real connections.

Another transaction holds one device's session row — a plain ``select … for update``, the
activity closer inside its batch, a link. The heartbeats of the other devices of the same
group-committed batch are answered while that lock is still held; the locked device's own
statement waits for the lock alone, bounded by the statement timeout, and then takes its
normal path (extended, or a new session when the row was closed meanwhile).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any, cast

import asyncpg
import httpx
import pytest
from prometheus_client import CollectorRegistry

from pin_sessions.bootstrap.api import build_api
from pin_sessions.bootstrap.database import build_runtime
from pin_sessions.platform.clock import FixedClock
from pin_sessions.platform.database import Bounds, Connection, Database
from pin_sessions.platform.http.wiring import app_services
from pin_sessions.platform.ids import new_id
from pin_sessions.platform.runtime import Runtime
from pin_sessions.settings import load_settings
from pin_sessions.user_activity import sessions
from pin_sessions.user_activity.domain import device_info
from pin_sessions.user_activity.heartbeats import Heartbeats
from pin_sessions.user_activity.http import HEARTBEAT_PATH
from pin_sessions.user_activity.linking import link_sign_in
from pin_sessions.user_activity.repository.loaded import QUERIES
from pin_sessions.user_activity.services import UserActivityServices
from tests.support.http import in_process
from tests.support.waiting import wait_until
from tests.user_activity.conftest import device, sessions_of
from tests.user_activity.jobs.support import close_once

FREE_DEVICES = 4
# Generous: an answer that needs no lock comes in milliseconds; only a broken build waits.
DEADLINE = 60
# Holds the closer inside its batch transaction, after it claimed and closed its sessions.
OUTBOX_GATE = "lock table messaging.outbox in share mode"
HEARTBEAT_ALONE_WAITING = """
select count(*) from pg_stat_activity
where datname = current_database() and wait_event_type = 'Lock' and query = $1
"""


@pytest.fixture
def settings_env(settings_env: dict[str, str]) -> dict[str, str]:
    """Long enough that the locked device's statement outlasts the test's own steps."""
    return {**settings_env, "PIN_DATABASE__STATEMENT_TIMEOUT": "60"}


async def _active_devices(runtime: Runtime, count: int) -> list[uuid.UUID]:
    devices = []
    for _ in range(count):
        anonymous_id = new_id()
        await sessions.start_session(
            runtime.database, anonymous_id, None, device_info(None, None), runtime.clock.now()
        )
        devices.append(anonymous_id)
    return devices


@asynccontextmanager
async def _held(dsn: str, statement: str, *args: object) -> AsyncIterator[Connection]:
    """A transaction of another connection, open for the block, that ran ``statement``."""
    holder = await asyncpg.connect(dsn)
    try:
        async with holder.transaction():
            await holder.execute(statement, *args)
            yield holder
    finally:
        await holder.close()


@asynccontextmanager
async def _row_lock(dsn: str, anonymous_id: uuid.UUID) -> AsyncIterator[None]:
    """The device's Active session row, held as another transaction's ``select … for update``."""
    async with _held(
        dsn,
        "select id from user_activity.sessions where anonymous_id = $1 and status = 'Active'"
        " for update",
        anonymous_id,
    ):
        yield


async def _alone_waiting(runtime: Runtime) -> bool:
    async with runtime.database.connection() as conn:
        return bool(await conn.fetchval(HEARTBEAT_ALONE_WAITING, QUERIES.heartbeat_one.text))


class _GatedConnection:
    """A pooled connection whose heartbeat batch statement waits while the gate is closed."""

    def __init__(self, conn: Connection, gate: BatchGate) -> None:
        self._conn = conn
        self._gate = gate

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)

    async def fetch(self, query: str, *args: Any, timeout: float | None = None) -> list[Any]:
        if query == QUERIES.heartbeat_batch.text:
            self._gate.held += 1
            await self._gate.opened.wait()
        return await self._conn.fetch(query, *args, timeout=timeout)


class BatchGate:
    """Holds batches before their statement, so what arrives meanwhile forms the next one."""

    def __init__(self) -> None:
        self.opened = asyncio.Event()
        self.opened.set()
        self.held = 0


class GatedDatabase(Database):
    """The API's pool, except that a closed gate holds the heartbeat batch statement."""

    def __init__(self, dsn: str, **options: Any) -> None:
        super().__init__(dsn, **options)
        self.gate = BatchGate()

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[Connection]:
        async with super().connection() as conn:
            yield cast("Connection", _GatedConnection(conn, self.gate))


class OneBatch:
    """Sends heartbeats so that they go together in one group-committed batch: a pilot
    heartbeat's batch is held at the gate until every one of them waits for the next."""

    def __init__(
        self, runtime: Runtime, client: httpx.AsyncClient, heartbeats: Heartbeats, gate: BatchGate
    ) -> None:
        self.runtime = runtime
        self.client = client
        self.heartbeats = heartbeats
        self.gate = gate

    async def send(self, devices: list[uuid.UUID]) -> list[asyncio.Task[httpx.Response]]:
        [pilot] = await _active_devices(self.runtime, 1)
        self.gate.opened.clear()
        held = self.gate.held
        first = asyncio.create_task(self.post(pilot))
        await wait_until(lambda: self.gate.held > held, timeout=DEADLINE, interval=0.005)
        sent = [asyncio.create_task(self.post(anonymous_id)) for anonymous_id in devices]
        await wait_until(
            lambda: self.heartbeats.waiting == len(devices), timeout=DEADLINE, interval=0.005
        )
        self.gate.opened.set()
        assert (await asyncio.wait_for(first, DEADLINE)).status_code == 200
        return sent

    async def post(self, anonymous_id: uuid.UUID) -> httpx.Response:
        return await self.client.post(HEARTBEAT_PATH, headers=device(anonymous_id))


@asynccontextmanager
async def _api(
    runtime: Runtime, settings_env: dict[str, str], database_url: str, clock: FixedClock
) -> AsyncIterator[tuple[OneBatch, CollectorRegistry]]:
    """The API in process on a gated pool bounded as ``api_database`` bounds the API's."""
    settings = load_settings(settings_env)
    options = settings.database
    database = GatedDatabase(
        database_url,
        max_size=options.pool_max,
        bounds=Bounds(options.statement_timeout, options.acquire_timeout),
        reset_sessions=False,
    )
    registry = CollectorRegistry()
    api = build_api(
        build_runtime(settings, database_url, clock=clock, registry=registry, database=database)
    )
    async with in_process(api) as client:
        yield (
            OneBatch(
                runtime,
                client,
                app_services(api).contexts.get(UserActivityServices).heartbeats,
                database.gate,
            ),
            registry,
        )


async def _answered(tasks: list[asyncio.Task[httpx.Response]]) -> list[httpx.Response]:
    return list(await asyncio.wait_for(asyncio.gather(*tasks), DEADLINE))


async def test_free_devices_are_answered_while_another_devices_row_is_locked(
    runtime: Runtime, settings_env: dict[str, str], database_url: str, clock: FixedClock
) -> None:
    locked, *free = await _active_devices(runtime, 1 + FREE_DEVICES)
    clock.advance(timedelta(seconds=40))
    async with _api(runtime, settings_env, database_url, clock) as (batch, registry):
        async with _row_lock(database_url, locked):
            locked_answer, *free_answers = await batch.send([locked, *free])
            # Causality: the lock is still held while the other devices are answered.
            answered = await _answered(free_answers)
            assert [answer.status_code for answer in answered] == [200] * FREE_DEVICES
            await wait_until(lambda: _alone_waiting(runtime), timeout=DEADLINE)
            assert not locked_answer.done()
        # Released: the locked device's own statement goes through.
        answer = await asyncio.wait_for(locked_answer, DEADLINE)

    assert answer.status_code == 200, answer.text
    assert answer.json()["restarted"] is False
    for anonymous_id in (locked, *free):
        [row] = await sessions_of(runtime, anonymous_id)
        assert row["last_activity_at"] == clock.now()
    assert registry.get_sample_value("user_activity_heartbeat_batch_size_sum") == 2 + FREE_DEVICES
    assert registry.get_sample_value("user_activity_heartbeat_row_locked_total") == 1


async def test_a_device_locked_past_the_statement_timeout_alone_gets_a_503(
    runtime: Runtime, settings_env: dict[str, str], database_url: str, clock: FixedClock
) -> None:
    locked, *free = await _active_devices(runtime, 1 + FREE_DEVICES)
    short = {**settings_env, "PIN_DATABASE__STATEMENT_TIMEOUT": "0.5"}
    async with (
        _api(runtime, short, database_url, clock) as (batch, _),
        _row_lock(database_url, locked),
    ):
        locked_answer, *free_answers = await batch.send([locked, *free])
        answered = await _answered(free_answers)
        # The lock is held throughout: the device's own statement timed out, and only it.
        timed_out = await asyncio.wait_for(locked_answer, DEADLINE)

    assert [answer.status_code for answer in answered] == [200] * FREE_DEVICES
    assert timed_out.status_code == 503
    assert timed_out.json()["code"] == "SERVICE_UNAVAILABLE"


async def test_a_closer_batch_holding_a_row_holds_only_its_device(
    runtime: Runtime, settings_env: dict[str, str], database_url: str, clock: FixedClock
) -> None:
    """The closer claimed and closed the idle device's session; until it commits, that row
    is locked. The other devices are answered meanwhile; the idle one, once the close
    commits, finds no Active session and starts a new one (INV-SES-003)."""
    idle, *free = await _active_devices(runtime, 1 + FREE_DEVICES)
    clock.advance(timedelta(minutes=45))
    async with _api(runtime, settings_env, database_url, clock) as (batch, _):
        # The free devices were heard recently; only the idle device is past the threshold.
        for anonymous_id in free:
            await batch.post(anonymous_id)
        async with _held(database_url, OUTBOX_GATE):
            closing = asyncio.create_task(close_once(runtime, CollectorRegistry()))
            await wait_until(lambda: _outbox_waiting(runtime), timeout=DEADLINE)
            idle_answer, *free_answers = await batch.send([idle, *free])
            answered = await _answered(free_answers)
            assert [answer.status_code for answer in answered] == [200] * FREE_DEVICES
            await wait_until(lambda: _alone_waiting(runtime), timeout=DEADLINE)
            assert not idle_answer.done() and not closing.done()
        closed = await asyncio.wait_for(closing, DEADLINE)
        answer = await asyncio.wait_for(idle_answer, DEADLINE)

    assert closed.count("closed") == 1
    assert answer.status_code == 200, answer.text
    assert answer.json()["restarted"] is True
    old, new = await sessions_of(runtime, idle)
    assert (old["status"], new["status"]) == ("Inactive", "Active")
    assert answer.json()["sessionId"] == str(new["id"])


async def _outbox_waiting(runtime: Runtime) -> bool:
    async with runtime.database.connection() as conn:
        return bool(
            await conn.fetchval(
                "select count(*) from pg_stat_activity where datname = current_database()"
                " and wait_event_type = 'Lock' and query like '%messaging.outbox%'"
            )
        )


async def test_a_link_holding_a_row_holds_only_its_device(
    runtime: Runtime, settings_env: dict[str, str], database_url: str, clock: FixedClock
) -> None:
    """Another user links the device while its heartbeat is in a batch: the link closes
    the old session and opens one for its user; the heartbeat, once the link commits,
    continues that new session, and the other devices never waited for any of it."""
    linked, *free = await _active_devices(runtime, 1 + FREE_DEVICES)
    user_a, user_b = new_id(), new_id()
    async with runtime.database.transaction() as conn:
        await link_sign_in(conn, linked, user_a, clock.now(), clock.now())
    clock.advance(timedelta(seconds=40))
    async with _api(runtime, settings_env, database_url, clock) as (batch, _):
        async with runtime.database.transaction() as linking:
            outcome = await link_sign_in(linking, linked, user_b, clock.now(), clock.now())
            assert outcome is not None and outcome.switched
            linked_answer, *free_answers = await batch.send([linked, *free])
            answered = await _answered(free_answers)
            assert [answer.status_code for answer in answered] == [200] * FREE_DEVICES
            await wait_until(lambda: _alone_waiting(runtime), timeout=DEADLINE)
            assert not linked_answer.done()
        answer = await asyncio.wait_for(linked_answer, DEADLINE)

    assert answer.status_code == 200, answer.text
    assert answer.json() == {
        "sessionId": str(outcome.session.id),
        "lastActivityAt": "2026-11-29T12:00:40Z",
        "restarted": False,
    }

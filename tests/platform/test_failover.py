"""Primary failover on a real primary and its synchronous standby (tests/support/failover.py).

The API runs on a multi-host ``PIN_DATABASE_URL`` naming both servers. While the primary
hangs and dies, every request answers 503 problem+json with ``Retry-After``, never 500, and
``/readyz`` is not ready; once the standby is promoted, writes go on with nothing restarted
and nothing acknowledged lost. Whatever the URL says (no ``target_session_attrs``, the standby
named first), the service writes only to the server that takes writes, and ``/readyz`` names
it.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

import asyncpg
import httpx
from prometheus_client import CollectorRegistry

from pin_sessions.bootstrap.api import build_api
from pin_sessions.bootstrap.database import build_reads, build_runtime, worker_database
from pin_sessions.platform.clock import FixedClock
from pin_sessions.platform.jobs import PollingWorker
from pin_sessions.platform.reads import Reads
from pin_sessions.platform.replica import ReadReplica, ReplicaState
from pin_sessions.settings import load_settings
from tests.conftest import T0
from tests.support.failover import ServerPair
from tests.support.http import in_process
from tests.support.waiting import wait_until
from tests.user_activity.jobs.rows import insert_sessions
from tests.user_activity.jobs.support import closer_worker

ACTIONS = "/api/user-activity/actions"
HOUR = timedelta(hours=1)
# A start of a server and a promotion on a loaded two-core machine take their time.
RECOVERY_TIMEOUT = 30.0
# Shorter than the hang, as a device's fetch that gives up on a slow answer.
CLIENT_TIMEOUT = 0.5


@asynccontextmanager
async def api_on(settings_env: dict[str, str], url: str) -> AsyncIterator[httpx.AsyncClient]:
    settings = load_settings(
        {**settings_env, "PIN_DATABASE_URL": url, "PIN_DATABASE__STATEMENT_TIMEOUT": "2"}
    )
    runtime = build_runtime(settings, url, clock=FixedClock(T0), registry=CollectorRegistry())
    async with in_process(build_api(runtime)) as http:
        yield http


class Devices:
    """Devices posting actions in a loop; every answer tallied, every acknowledged action kept."""

    def __init__(self, http: httpx.AsyncClient, count: int) -> None:
        self._http = http
        self._ids = [str(uuid.uuid4()) for _ in range(count)]
        self.statuses: Counter[int] = Counter()
        self.acknowledged: list[uuid.UUID] = []
        self.without_retry_after = 0
        self.gave_up = 0
        self._stop = asyncio.Event()

    async def _device(self, anonymous_id: str) -> None:
        while not self._stop.is_set():
            try:
                # A client that gives up hangs up, which cancels its request's query.
                async with asyncio.timeout(CLIENT_TIMEOUT):
                    response = await self._http.post(
                        ACTIONS, headers={"X-Anonymous-Id": anonymous_id}, json={"type": "ok"}
                    )
            except TimeoutError:
                self.gave_up += 1
                continue
            self.statuses[response.status_code] += 1
            if response.status_code == 201:
                self.acknowledged.append(uuid.UUID(response.json()["actionId"]))
            elif response.status_code == 503:
                self.without_retry_after += "Retry-After" not in response.headers
                await asyncio.sleep(0.05)  # as a client honouring Retry-After would, briefly

    @asynccontextmanager
    async def posting(self) -> AsyncIterator[Devices]:
        tasks = [asyncio.create_task(self._device(anonymous_id)) for anonymous_id in self._ids]
        try:
            yield self
        finally:
            self._stop.set()
            await asyncio.gather(*tasks)

    async def until_acknowledged(self, more: int) -> None:
        target = len(self.acknowledged) + more
        await wait_until(lambda: len(self.acknowledged) >= target, timeout=RECOVERY_TIMEOUT)


async def readiness(http: httpx.AsyncClient) -> tuple[int, dict[str, Any]]:
    response = await http.get("/readyz")
    body: dict[str, Any] = response.json()
    return response.status_code, body


async def stored_actions(dsn: str) -> set[uuid.UUID]:
    conn = await asyncpg.connect(dsn)
    try:
        return {row["id"] for row in await conn.fetch("select id from user_activity.action_events")}
    finally:
        await conn.close()


async def test_a_primary_that_hangs_and_dies_costs_503s_never_a_500_and_loses_no_write(
    pair: ServerPair, settings_env: dict[str, str]
) -> None:
    url = pair.url(query="target_session_attrs=read-write")
    async with api_on(settings_env, url) as http:
        async with Devices(http, 48).posting() as devices:
            await devices.until_acknowledged(50)
            with pair.primary_frozen():
                await asyncio.sleep(1.0)  # the hang: requests pile up on the frozen server
                pair.kill_primary()
            status, body = await readiness(http)
            assert status == 503, body
            pair.promote_standby()
            await devices.until_acknowledged(50)
        status, body = await readiness(http)
        assert status == 200, body
        assert body["database"] == {"host": pair.standby.address}
    assert devices.statuses[500] == 0, devices.statuses
    assert devices.without_retry_after == 0
    assert set(devices.statuses) <= {201, 503}, devices.statuses
    assert set(devices.acknowledged) <= await stored_actions(pair.standby.admin_dsn())


async def post_action(http: httpx.AsyncClient) -> httpx.Response:
    return await http.post(
        ACTIONS, headers={"X-Anonymous-Id": str(uuid.uuid4())}, json={"type": "ok"}
    )


async def test_a_url_naming_the_standby_first_without_target_session_attrs_writes_to_the_primary(
    pair: ServerPair, settings_env: dict[str, str]
) -> None:
    async with api_on(settings_env, pair.url(pair.standby, pair.primary)) as http:
        for _ in range(3):  # more than one pooled connection, all of them on the primary
            response = await post_action(http)
            assert response.status_code == 201, response.text
        status, body = await readiness(http)
    assert (status, body["database"]) == (200, {"host": pair.primary.address})


async def test_while_only_a_standby_answers_writes_get_503_and_readyz_is_not_ready(
    pair: ServerPair, settings_env: dict[str, str]
) -> None:
    """A URL without target_session_attrs, as CloudNativePG's generated one: in the gap
    between the primary's death and the promotion, the standby answers but takes no
    writes, and the service neither writes to it nor calls itself ready."""
    env = {**settings_env, "PIN_DATABASE__POOL_MAX": "2"}
    async with api_on(env, pair.url()) as http:
        assert (await post_action(http)).status_code == 201
        pair.kill_primary()
        pair.wait_primary_gone()
        for _ in range(6):  # past every pooled connection, into reconnecting
            response = await post_action(http)
            assert response.status_code == 503, response.text
            assert response.headers["Retry-After"] == "1"
        status, body = await readiness(http)
        assert status == 503, body

        pair.promote_standby()

        async def ready() -> bool:
            return (await readiness(http))[0] == 200

        await wait_until(ready, timeout=RECOVERY_TIMEOUT, interval=0.1)
        assert (await post_action(http)).status_code == 201
        assert (await readiness(http))[1]["database"] == {"host": pair.standby.address}


async def served_by(reads: Reads) -> int:
    """The port of the server a read that tolerates lag ran on."""
    return int(await reads.run(lambda conn: conn.fetchval("select inet_server_port()")))


async def judged(replica: ReadReplica) -> ReplicaState:
    states: list[ReplicaState] = []

    async def decided() -> bool:
        states.append(await replica.check())
        return states[-1] is not ReplicaState.UNKNOWN

    await wait_until(decided, timeout=RECOVERY_TIMEOUT, interval=0.1)
    return states[-1]


async def test_a_read_url_naming_the_primary_first_reads_on_the_standby_until_it_is_promoted(
    pair: ServerPair, settings_env: dict[str, str]
) -> None:
    primary_url = pair.url()
    settings = load_settings(
        {**settings_env, "PIN_DATABASE_URL": primary_url, "PIN_DATABASE__READ_URL": pair.url()}
    )
    runtime = build_runtime(settings, primary_url, registry=CollectorRegistry())
    await runtime.database.open()
    reads = build_reads(runtime)  # no background check: only the checks this test runs
    assert reads.replica is not None
    try:
        assert await judged(reads.replica) is ReplicaState.OK
        assert await served_by(reads) == pair.standby.port

        pair.promote_standby()
        assert await judged(reads.replica) is ReplicaState.NOT_REPLICA
        assert await served_by(reads) == pair.primary.port
    finally:
        await reads.replica.close()
        await runtime.database.close()


SELECT_SESSION_ENDED = """
select position, aggregate_id from messaging.outbox
where event_type = 'pin.user-activity.session-ended'
order by position
"""
STALE_SESSIONS = 3000
CLOSER_BATCH = 100


async def test_a_failover_while_the_closer_is_mid_batch_loses_no_event_and_keeps_their_order(
    pair: ServerPair, settings_env: dict[str, str]
) -> None:
    """Each batch closes its sessions and appends their events in one transaction: a batch
    the failover cut is rolled back whole and closed again on the new primary; every batch
    acknowledged before is on the standby, and the outbox goes on after it in order."""
    url = pair.url()
    settings = load_settings({**settings_env, "PIN_DATABASE_URL": url})
    runtime = build_runtime(settings, url, clock=FixedClock(T0), registry=CollectorRegistry())
    closer_database = worker_database(settings, url)
    await closer_database.open()
    try:
        async with closer_database.transaction() as conn:
            sessions = await insert_sessions(
                conn, count=STALE_SESSIONS, created_at=T0 - HOUR, last_activity_at=T0 - HOUR
            )
        worker = closer_worker(
            runtime, CollectorRegistry(), database=closer_database, batch_size=CLOSER_BATCH
        )
        passing = asyncio.create_task(worker.run_pass(asyncio.Event()))
        await wait_until(
            lambda: _events_at_least(pair.primary.admin_dsn(), 2 * CLOSER_BATCH), timeout=60
        )
        with pair.primary_frozen():
            pair.kill_primary()
        cut = await passing
        pair.promote_standby()
        before = await _session_ended(pair.standby.admin_dsn())

        assert cut is not None and not cut.succeeded  # the failover did cut the run
        assert 2 * CLOSER_BATCH <= len(before) < STALE_SESSIONS
        await wait_until(lambda: _pass_succeeds(worker), timeout=RECOVERY_TIMEOUT, interval=0.2)
    finally:
        await closer_database.close()

    after = await _session_ended(pair.standby.admin_dsn())
    assert after[: len(before)] == before  # what was acknowledged stayed, in its place
    assert sorted(aggregate for _, aggregate in after) == sorted(map(str, sessions))
    assert [position for position, _ in after] == sorted({position for position, _ in after})


async def _events_at_least(dsn: str, count: int) -> bool:
    return len(await _session_ended(dsn)) >= count


async def _session_ended(dsn: str) -> list[tuple[int, str]]:
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(SELECT_SESSION_ENDED)
    finally:
        await conn.close()
    return [(row["position"], row["aggregate_id"]) for row in rows]


async def _pass_succeeds(worker: PollingWorker) -> bool:
    result = await worker.run_pass(asyncio.Event())
    return result is not None and result.succeeded

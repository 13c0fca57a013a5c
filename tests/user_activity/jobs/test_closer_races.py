"""The closer racing the device and link's force-close: one winner per session, and
exactly one session-ended per session, ever (INV-SES-003, INV-SES-005, INV-SES-006)."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

import httpx
from prometheus_client import CollectorRegistry

from pin_sessions.platform.database import Database
from pin_sessions.platform.devices import DeviceType
from pin_sessions.platform.ids import new_id
from pin_sessions.platform.runtime import Runtime
from pin_sessions.user_activity import linking
from pin_sessions.user_activity.domain import DeviceInfo, SignedInCaller
from pin_sessions.user_activity.linking import link_request
from pin_sessions.user_activity.repository.loaded import QUERIES
from tests.user_activity.conftest import device
from tests.user_activity.jobs.rows import insert_sessions, insert_views, session_ended_counts
from tests.user_activity.jobs.support import close_once, closer_worker, wait_for_lock_waiters

HEARTBEAT = "/api/user-activity/sessions/heartbeat"
IDLE = timedelta(minutes=20)
HOUR = timedelta(hours=1)
DESKTOP = DeviceInfo("test-agent", DeviceType.DESKTOP, None, None, None)
# Holds every writer of the outbox after it changed its rows and before it commits: the
# closer then sits inside its batch transaction, holding the sessions it claimed.
OUTBOX_GATE = "lock table messaging.outbox in share mode"


async def _idle_sessions(
    runtime: Runtime, count: int, *, user_id: uuid.UUID | None = None
) -> list[tuple[uuid.UUID, uuid.UUID]]:
    """``count`` sessions idle past the threshold, each on its own device with one open view."""
    now = runtime.clock.now()
    async with runtime.database.connection() as conn:
        ids = await insert_sessions(
            conn, count=count, created_at=now - HOUR, last_activity_at=now - IDLE, user_id=user_id
        )
        await insert_views(conn, ids, started_at=now - HOUR)
        rows = await conn.fetch(
            "select id, anonymous_id from user_activity.sessions where id = any($1)", ids
        )
    return [(row["id"], row["anonymous_id"]) for row in rows]


async def _status(runtime: Runtime, session_id: uuid.UUID) -> str:
    async with runtime.database.connection() as conn:
        status: str = await conn.fetchval(
            "select status from user_activity.sessions where id = $1", session_id
        )
    return status


async def _ended_counts(runtime: Runtime) -> dict[str, int]:
    async with runtime.database.connection() as conn:
        return dict(await session_ended_counts(conn))


async def test_a_heartbeat_in_flight_keeps_its_session_open(
    runtime: Runtime, registry: CollectorRegistry
) -> None:
    [(session_id, anonymous_id)] = await _idle_sessions(runtime, 1)
    now = runtime.clock.now()
    async with runtime.database.transaction() as heartbeat:
        # The heartbeat has updated the row and not committed yet when the closer claims.
        extended = await QUERIES.heartbeat_batch.fetch(
            heartbeat, anonymous_ids=[anonymous_id], ats=[now]
        )
        assert len(extended) == 1
        result = await close_once(runtime, registry)
    assert result.count("closed") == 0
    assert await _status(runtime, session_id) == "Active"
    # Committed, the heartbeat made the session fresh: the next run leaves it open too.
    assert (await close_once(runtime, CollectorRegistry())).count("closed") == 0
    assert await _ended_counts(runtime) == {}


async def test_a_heartbeat_that_committed_first_keeps_the_session_open(
    runtime: Runtime, registry: CollectorRegistry, http: httpx.AsyncClient
) -> None:
    [(session_id, anonymous_id)] = await _idle_sessions(runtime, 1)

    response = await http.post(HEARTBEAT, headers=device(anonymous_id))
    result = await close_once(runtime, registry)

    assert response.json()["restarted"] is False
    assert result.count("closed") == 0
    assert await _status(runtime, session_id) == "Active"


async def test_a_heartbeat_after_the_close_starts_a_new_session(
    runtime: Runtime, registry: CollectorRegistry, http: httpx.AsyncClient
) -> None:
    [(session_id, anonymous_id)] = await _idle_sessions(runtime, 1)
    async with runtime.database.transaction() as gate:
        await gate.execute(OUTBOX_GATE)
        closing = asyncio.create_task(close_once(runtime, registry))
        await wait_for_lock_waiters(runtime, 1)
        # The heartbeat arrives while the closer holds the session it is closing.
        heartbeat = asyncio.create_task(http.post(HEARTBEAT, headers=device(anonymous_id)))
        await wait_for_lock_waiters(runtime, 2)
        assert not closing.done() and not heartbeat.done()
    result = await closing
    response = (await heartbeat).json()

    assert result.count("closed") == 1
    assert await _status(runtime, session_id) == "Inactive"
    # INV-SES-003: the closed session is never touched again; the device gets a new one.
    assert response["restarted"] is True
    assert response["sessionId"] != str(session_id)
    assert await _status(runtime, uuid.UUID(response["sessionId"])) == "Active"
    assert await _ended_counts(runtime) == {str(session_id): 1}


async def test_link_force_close_first_then_the_closer_skips_the_session(
    runtime: Runtime, registry: CollectorRegistry
) -> None:
    user_a, user_b = new_id(), new_id()
    [(session_id, anonymous_id)] = await _idle_sessions(runtime, 1, user_id=user_a)
    now = runtime.clock.now()
    async with runtime.database.transaction() as linking:
        outcome = await link_request(
            linking, anonymous_id, SignedInCaller(user_b, now), DESKTOP, now
        )
        # The force-close is done but not committed: the closer must pass the row by.
        during = await close_once(runtime, registry)
    after = await close_once(runtime, CollectorRegistry())

    assert outcome is not None and outcome.switched
    assert (during.count("closed"), after.count("closed")) == (0, 0)
    assert await _status(runtime, session_id) == "Inactive"
    assert await _ended_counts(runtime) == {str(session_id): 1}


async def test_the_closer_first_then_link_finds_no_session_to_force_close(
    runtime: Runtime, registry: CollectorRegistry
) -> None:
    user_a, user_b = new_id(), new_id()
    [(session_id, anonymous_id)] = await _idle_sessions(runtime, 1, user_id=user_a)
    now = runtime.clock.now()
    async with runtime.database.transaction() as gate:
        await gate.execute(OUTBOX_GATE)
        closing = asyncio.create_task(close_once(runtime, registry))
        await wait_for_lock_waiters(runtime, 1)
        # Link waits on the session the closer holds.
        linker = asyncio.create_task(
            linking.link(runtime.database, anonymous_id, SignedInCaller(user_b, now), DESKTOP, now)
        )
        await wait_for_lock_waiters(runtime, 2)
    result = await closing
    outcome = await linker

    assert result.count("closed") == 1
    # The closer won: link sees no Active session, so it starts one without closing any.
    assert (outcome.switched, outcome.created, outcome.session.user_id) == (False, True, user_b)
    assert await _ended_counts(runtime) == {str(session_id): 1}


async def test_many_links_racing_the_closer_end_every_session_exactly_once(
    runtime: Runtime, registry: CollectorRegistry, database_url: str
) -> None:
    user_a, user_b = new_id(), new_id()
    sessions = await _idle_sessions(runtime, 200, user_id=user_a)
    now = runtime.clock.now()
    closer_database = Database(database_url, max_size=1)
    await closer_database.open()
    worker = closer_worker(runtime, registry, batch_size=5, database=closer_database)

    # As many links in flight as the pool has connections: 200 waiting at once would wait on
    # the pool (and time out on a loaded machine), which is not the race this test is about.
    in_flight = asyncio.Semaphore(8)

    async def link(anonymous_id: uuid.UUID) -> bool:
        caller = SignedInCaller(user_b, now)
        async with in_flight:
            outcome = await linking.link(runtime.database, anonymous_id, caller, DESKTOP, now)
        return outcome.switched

    links_done = asyncio.Event()

    async def keep_closing() -> int:
        # Pass after pass for as long as the links run, so the two keep meeting.
        closed = 0
        while not links_done.is_set():
            result = await worker.run_pass(asyncio.Event())
            assert result is not None and result.succeeded
            closed += result.count("closed")
            await asyncio.sleep(0)
        return closed

    closing = asyncio.create_task(keep_closing())
    try:
        switched = await asyncio.gather(*(link(anonymous_id) for _, anonymous_id in sessions))
        links_done.set()
        closed_by_job = await closing
    finally:
        await closer_database.close()

    assert closed_by_job + sum(switched) == 200
    assert await _ended_counts(runtime) == {str(session_id): 1 for session_id, _ in sessions}
    async with runtime.database.connection() as conn:
        active = await conn.fetch(
            "select anonymous_id, user_id from user_activity.sessions where status = 'Active'"
        )
        open_views = await conn.fetchval(
            "select count(*) from user_activity.property_object_views where ended_at is null"
        )
        view_events = await conn.fetchval(
            "select count(*) from messaging.outbox "
            "where event_type = 'pin.user-activity.property-object-view-ended'"
        )
    assert sorted(row["anonymous_id"] for row in active) == sorted(a for _, a in sessions)
    assert {row["user_id"] for row in active} == {user_b}
    assert (open_views, view_events) == (0, 200)

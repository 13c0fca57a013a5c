"""SPEC §10 in user-activity: the caller's export, and the consumer of user-erased.

The erasure deletes the user's sessions, views and actions (Active ones deleted at once,
never closed, so no session-ended) and leaves a tombstone, so that late sign-in events and requests
already under way write nothing linked to the user. Races with requests, heartbeats and
the activity closer run for real, in parallel, on several connections.
"""

from __future__ import annotations

import asyncio
import gc
import uuid
from datetime import timedelta

import asyncpg
import httpx
import psutil
from prometheus_client import CollectorRegistry

from pin_sessions.platform.clock import FixedClock
from pin_sessions.platform.database import Database
from pin_sessions.platform.erasure import user_digest
from pin_sessions.platform.ids import new_id
from pin_sessions.platform.messaging.envelope import Message
from pin_sessions.platform.messaging.runner import Outcome
from pin_sessions.platform.runtime import Runtime
from pin_sessions.user_activity.consumers import SignedInConsumer, UserErasedConsumer
from pin_sessions.user_activity.domain import SignedInCaller, device_info
from pin_sessions.user_activity.sessions import callers_session
from pin_sessions.user_activity.user_data import erase_user
from tests.support.erasure import ERASURE_BATCH, deliver, user_erased_message
from tests.support.tokens import Tokens
from tests.support.users import signed_in_user
from tests.support.waiting import wait_until
from tests.user_activity.conftest import IPHONE, UserFactory, device, outbox, sessions_of
from tests.user_activity.jobs.support import close_once, lock_waiters, wait_for_lock_waiters

START = "/api/user-activity/sessions/start"
LINK = "/api/user-activity/sessions/link"
HEARTBEAT = "/api/user-activity/sessions/heartbeat"
ACTIONS = "/api/user-activity/actions"
VIEWS = "/api/user-activity/property-views"
EXPORT = "/api/user-activity/me/export"

COUNT_USER_ROWS = """
select (select count(*) from user_activity.sessions where user_id = $1)
     + (select count(*) from user_activity.property_object_views where user_id = $1)
     + (select count(*) from user_activity.action_events where user_id = $1)
"""


async def _activity(
    http: httpx.AsyncClient, anonymous_id: uuid.UUID, headers: dict[str, str], actions: int = 2
) -> None:
    assert (await http.post(START, headers=headers)).status_code == 200
    for n in range(actions):
        response = await http.post(ACTIONS, headers=headers, json={"type": f"a{n}"})
        assert response.status_code == 201, response.text
    view = {"propertyObjectId": str(new_id())}
    assert (await http.post(VIEWS, headers=headers, json=view)).status_code == 201


async def _rows_of(runtime: Runtime, user_id: uuid.UUID) -> int:
    async with runtime.database.connection() as conn:
        count: int = await conn.fetchval(COUNT_USER_ROWS, user_id)
    return count


async def _table_counts(runtime: Runtime) -> dict[str, int]:
    async with runtime.database.connection() as conn:
        return {
            table: await conn.fetchval(f"select count(*) from user_activity.{table}")
            for table in ("sessions", "property_object_views", "action_events")
        }


async def test_the_export_holds_the_callers_sessions_views_and_actions_only(
    http: httpx.AsyncClient, new_user: UserFactory
) -> None:
    user, other = await new_user(), await new_user()
    phone_device, laptop, others_device = new_id(), new_id(), new_id()
    await _activity(http, phone_device, device(phone_device, user), actions=3)
    await _activity(http, laptop, device(laptop, user), actions=1)
    await _activity(http, others_device, device(others_device, other))
    guest = new_id()
    await _activity(http, guest, device(guest))

    response = await http.get(EXPORT, headers=user.headers)

    assert response.status_code == 200, response.text
    assert response.headers["cache-control"] == "no-store"
    document = response.json()
    assert document["userId"] == str(user.user_id)
    sessions = document["sessions"]
    assert {s["anonymousId"] for s in sessions} == {str(phone_device), str(laptop)}
    by_device = {s["anonymousId"]: s for s in sessions}
    assert [a["type"] for a in by_device[str(phone_device)]["actions"]] == ["a0", "a1", "a2"]
    assert len(by_device[str(laptop)]["propertyViews"]) == 1
    assert by_device[str(laptop)]["device"]["type"] == "Mobile"
    # The in-process client is 127.0.0.1: exported as its network only.
    assert {s["device"]["ipAddress"] for s in sessions} == {"127.0.0.0/24"}
    assert "127.0.0.1" not in response.text
    assert str(others_device) not in response.text and str(guest) not in response.text


async def test_the_export_needs_the_user_and_is_404_once_erased(
    http: httpx.AsyncClient, runtime: Runtime, new_user: UserFactory, clock: FixedClock
) -> None:
    user = await new_user()
    assert (await http.get(EXPORT)).status_code == 401
    await erase_user(runtime.database, user.user_id, clock.now(), batch_size=ERASURE_BATCH)

    response = await http.get(EXPORT, headers=user.headers)

    assert response.status_code == 404
    assert response.json()["code"] == "USER_ACTIVITY_USER_NOT_FOUND"


async def test_the_erasure_deletes_the_users_rows_and_nobody_elses(
    http: httpx.AsyncClient, runtime: Runtime, new_user: UserFactory, clock: FixedClock
) -> None:
    user, other = await new_user(), await new_user()
    mine, theirs, guest = new_id(), new_id(), new_id()
    # A guest session linked on sign-in: its guest-time actions are the user's too.
    await _activity(http, mine, device(mine))
    assert (await http.post(LINK, headers=device(mine, user))).status_code == 200
    await _activity(http, theirs, device(theirs, other))
    await _activity(http, guest, device(guest))
    before = await _table_counts(runtime)
    events_before = len(await outbox(runtime, "pin.user-activity.session-ended"))

    outcome = await deliver(
        runtime, UserErasedConsumer(ERASURE_BATCH), user_erased_message(user.user_id, clock.now())
    )

    assert outcome is Outcome.APPLIED
    assert await sessions_of(runtime, mine) == []
    assert await _rows_of(runtime, user.user_id) == 0
    after = await _table_counts(runtime)
    assert after == {
        "sessions": before["sessions"] - 1,
        "property_object_views": before["property_object_views"] - 1,
        "action_events": before["action_events"] - 2,
    }
    # The Active session ended without session-ended: it is gone, not counted as ended.
    assert len(await outbox(runtime, "pin.user-activity.session-ended")) == events_before
    async with runtime.database.connection() as conn:
        tombstone = await conn.fetchval(
            "select count(*) from user_activity.erased_users where user_digest = $1",
            user_digest(user.user_id),
        )
    assert tombstone == 1
    # The device comes back as a guest: a new session, nobody's.
    assert (await http.post(HEARTBEAT, headers=device(mine))).json()["restarted"] is True
    [session] = await sessions_of(runtime, mine)
    assert session["user_id"] is None


# Records each DELETE statement on the actions: how many rows, in which transaction.
COUNT_ACTION_DELETES = """
create table public.action_deletes (seq serial, rows int not null, tx xid8 not null);
create function public.count_action_deletes() returns trigger language plpgsql as $$
begin
    insert into public.action_deletes (rows, tx) select count(*), pg_current_xact_id() from gone;
    return null;
end $$;
create trigger count_action_deletes after delete on user_activity.action_events
referencing old table as gone for each statement execute function public.count_action_deletes();
"""


async def test_the_erasure_is_idempotent_and_runs_in_batches(
    http: httpx.AsyncClient, runtime: Runtime, new_user: UserFactory, clock: FixedClock
) -> None:
    user = await new_user()
    anonymous_id = new_id()
    await _activity(http, anonymous_id, device(anonymous_id, user), actions=25)
    # Closed, the session is history: what the erasure's batches delete.
    clock.advance(timedelta(minutes=20))
    assert (await close_once(runtime, CollectorRegistry())).count("closed") == 1
    message = user_erased_message(user.user_id, clock.now())

    async with runtime.database.connection() as conn:
        await conn.execute(COUNT_ACTION_DELETES)

    deleted = await erase_user(runtime.database, user.user_id, clock.now(), batch_size=4)

    assert deleted == 25 + 1 + 1  # actions, the view, the session
    async with runtime.database.connection() as conn:
        statements = await conn.fetch("select rows, tx from public.action_deletes order by seq")
    # 25 actions in statements of at most 4 rows, each its own transaction.
    assert [row["rows"] for row in statements] == [4, 4, 4, 4, 4, 4, 1]
    assert len({row["tx"] for row in statements}) == len(statements)
    assert await _rows_of(runtime, user.user_id) == 0
    assert await erase_user(runtime.database, user.user_id, clock.now(), batch_size=4) == 0
    consumer = UserErasedConsumer(ERASURE_BATCH)
    assert await deliver(runtime, consumer, message) is Outcome.APPLIED
    assert await deliver(runtime, consumer, message) is Outcome.DUPLICATE


async def test_an_active_session_of_the_erased_user_is_deleted_never_closed(
    http: httpx.AsyncClient, runtime: Runtime, new_user: UserFactory, clock: FixedClock
) -> None:
    """Only the closer and a link close a session: the erasure deletes an Active one with its
    children in its first transaction, before the batches. Held up on a locked action of the
    user's history, the erasure has already deleted the Active session, not ended it."""
    user = await new_user()
    old_device, current_device = new_id(), new_id()
    await _activity(http, old_device, device(old_device, user), actions=1)
    clock.advance(timedelta(minutes=20))
    assert (await close_once(runtime, CollectorRegistry())).count("closed") == 1
    async with runtime.database.transaction() as conn:
        again = await signed_in_user(
            conn, Tokens.of(runtime).signer, now=clock.now(), user_id=user.user_id
        )
    await _activity(http, current_device, device(current_device, again), actions=1)
    [history] = await sessions_of(runtime, old_device)
    async with runtime.database.transaction() as holder:
        await holder.execute(
            "select 1 from user_activity.action_events where session_id = $1 for update",
            history["id"],
        )
        erasure = asyncio.create_task(
            erase_user(runtime.database, user.user_id, clock.now(), batch_size=10)
        )
        await wait_for_lock_waiters(runtime, 1)
        assert await sessions_of(runtime, current_device) == []
        assert not erasure.done()
    await erasure
    assert await _rows_of(runtime, user.user_id) == 0
    [ended] = await outbox(runtime, "pin.user-activity.session-ended")
    assert ended["payload"]["SessionId"] == str(history["id"])  # the closer's, before


async def test_a_late_sign_in_of_an_erased_user_links_nothing(
    http: httpx.AsyncClient, runtime: Runtime, new_user: UserFactory, clock: FixedClock
) -> None:
    user = await new_user()
    anonymous_id = new_id()
    assert (await http.post(START, headers=device(anonymous_id))).status_code == 200
    sign_in = _sign_in_message(user.user_id, anonymous_id, clock)
    await deliver(
        runtime, UserErasedConsumer(ERASURE_BATCH), user_erased_message(user.user_id, clock.now())
    )

    outcome = await deliver(runtime, SignedInConsumer(CollectorRegistry()), sign_in)

    assert outcome is Outcome.APPLIED
    [session] = await sessions_of(runtime, anonymous_id)
    assert session["user_id"] is None
    assert await outbox(runtime, "pin.user-activity.session-linked") == []


def _sign_in_message(user_id: uuid.UUID, anonymous_id: uuid.UUID, clock: FixedClock) -> Message:
    """Identity's sign-in event as the bus delivers it."""
    return Message(
        message_id=new_id(),
        topic="pin.identity.sign-ins.v1",
        event_type="pin.identity.sign-ins",
        version=1,
        aggregate_type="User",
        aggregate_id=str(user_id),
        created_at=clock.now(),
        payload={
            "UserId": str(user_id),
            "RefreshSessionId": str(new_id()),
            "AnonymousId": str(anonymous_id),
            "SignedInAt": clock.now().isoformat(),
        },
    )


async def test_a_request_that_passed_its_token_check_writes_nothing_once_erased(
    http: httpx.AsyncClient, runtime: Runtime, new_user: UserFactory, clock: FixedClock
) -> None:
    """The token is still live in identity here: only the tombstone stands in the way."""
    user = await new_user()
    anonymous_id = new_id()
    await erase_user(runtime.database, user.user_id, clock.now(), batch_size=ERASURE_BATCH)

    for response in (
        await http.post(START, headers=device(anonymous_id, user)),
        await http.post(ACTIONS, headers=device(anonymous_id, user), json={"type": "a"}),
        await http.post("/api/user-activity/sessions/link", headers=device(anonymous_id, user)),
    ):
        assert response.status_code == 401, response.text
        assert response.json()["code"] == "AUTH_SESSION_NOT_ACTIVE"
    assert await _rows_of(runtime, user.user_id) == 0


async def test_requests_racing_the_erasure_leave_nothing_of_the_user(
    http: httpx.AsyncClient, runtime: Runtime, new_user: UserFactory, clock: FixedClock
) -> None:
    """Signed-in actions and guest heartbeats of the user's devices, during the erasure."""
    user = await new_user()
    devices = [new_id() for _ in range(4)]
    for anonymous_id in devices:
        await _activity(http, anonymous_id, device(anonymous_id, user), actions=30)

    async def act(anonymous_id: uuid.UUID) -> list[int]:
        statuses = []
        for n in range(8):
            response = await http.post(
                ACTIONS, headers=device(anonymous_id, user), json={"type": f"late-{n}"}
            )
            statuses.append(response.status_code)
            statuses.append((await http.post(HEARTBEAT, headers=device(anonymous_id))).status_code)
        return statuses

    erasing = asyncio.create_task(
        erase_user(runtime.database, user.user_id, clock.now(), batch_size=10)
    )
    results = await asyncio.gather(*(act(anonymous_id) for anonymous_id in devices))
    await erasing

    statuses = [status for result in results for status in result]
    assert set(statuses) <= {200, 201, 401}, statuses
    assert 401 in statuses
    assert await _rows_of(runtime, user.user_id) == 0
    for anonymous_id in devices:
        for session in await sessions_of(runtime, anonymous_id):
            assert session["user_id"] is None


async def test_the_closer_racing_the_erasure_ends_each_session_once(
    http: httpx.AsyncClient,
    runtime: Runtime,
    new_user: UserFactory,
    clock: FixedClock,
    registry: CollectorRegistry,
    database_url: str,
) -> None:
    """The closer on its own pool, as its own process would be; sessions idle past 15 min."""
    user = await new_user()
    devices = [new_id() for _ in range(40)]
    for anonymous_id in devices:
        assert (await http.post(START, headers=device(anonymous_id, user))).status_code == 200
    clock.advance(timedelta(minutes=20))
    closer_database = Database(database_url, max_size=2)
    await closer_database.open()
    try:
        await asyncio.gather(
            close_once(runtime, registry, batch_size=5, database=closer_database),
            erase_user(runtime.database, user.user_id, clock.now(), batch_size=5),
        )
    finally:
        await closer_database.close()

    assert await _rows_of(runtime, user.user_id) == 0
    ended = [
        row["payload"]["SessionId"]
        for row in await outbox(runtime, "pin.user-activity.session-ended")
    ]
    # Whoever won each session ended it: the closer with its one event, or the erasure
    # with none. Never both, never twice.
    assert len(ended) == len(set(ended)) <= len(devices)


async def test_exporting_100k_actions_over_http_holds_a_bounded_amount_of_memory(
    runtime: Runtime,
    new_user: UserFactory,
    clock: FixedClock,
    database_url: str,
    api_url: str,
) -> None:
    """The API serves the export over real HTTP from this process; its resident memory
    is sampled as every chunk arrives (the client keeps none of them).

    The document is about 15 MiB of JSON. Streamed a page at a time, the process grew by
    about 3 MiB when this test was written; the same export reading every action in one
    page grew by about 62 MiB. The bound sits between: 20 MiB.
    """
    user = await new_user()
    session_id = new_id()
    # Seeding is not under test: a connection of its own, without the API's time bounds.
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute(
            "insert into user_activity.sessions (id, anonymous_id, user_id, linked_at, "
            "signed_in_at, status, created_at, last_activity_at, device_user_agent, device_type) "
            "values ($1, $2, $3, $4, $4, 'Active', $4, $4, 'tests', 'Desktop')",
            session_id,
            new_id(),
            user.user_id,
            clock.now(),
        )
        await conn.execute(
            "insert into user_activity.action_events (id, session_id, user_id, type, data, "
            "created_at) "
            "select gen_random_uuid(), $1, $2, 'favorites.add', jsonb_build_object('n', n), "
            "$3::timestamptz + n * interval '1 second' from generate_series(1, 100000) as n",
            session_id,
            user.user_id,
            clock.now(),
        )
    finally:
        await conn.close()
    process = psutil.Process()
    gc.collect()
    before = process.memory_info().rss
    highest, written = before, 0
    async with (
        httpx.AsyncClient(base_url=api_url, timeout=120) as client,
        client.stream("GET", EXPORT, headers=user.headers) as response,
    ):
        assert response.status_code == 200
        async for chunk in response.aiter_raw():
            written += len(chunk)
            highest = max(highest, process.memory_info().rss)

    growth = highest - before
    assert written > 10_000_000  # 100k actions of about 130 bytes each
    assert growth < 20 * 2**20, f"grew {growth / 2**20:.1f} MiB for {written / 2**20:.1f} MiB"


async def test_a_request_writing_when_the_erasure_starts_is_waited_for(
    runtime: Runtime, new_user: UserFactory, clock: FixedClock, database_url: str
) -> None:
    """The request's transaction passed the guard and started a session of the user, and
    has not committed: the erasure waits for it, then deletes that session too."""
    user = await new_user()
    anonymous_id = new_id()
    writer = Database(database_url, max_size=1)
    await writer.open()
    try:
        async with writer.transaction() as conn:
            await callers_session(
                conn,
                anonymous_id,
                SignedInCaller(user.user_id, clock.now()),
                device_info(IPHONE, None),
                clock.now(),
            )
            erasing = asyncio.create_task(
                erase_user(runtime.database, user.user_id, clock.now(), batch_size=ERASURE_BATCH)
            )

            async def blocked_or_done() -> bool:
                return erasing.done() or await lock_waiters(runtime) > 0

            await wait_until(blocked_or_done, timeout=60, interval=0.01)
        await erasing
    finally:
        await writer.close()

    assert await sessions_of(runtime, anonymous_id) == []

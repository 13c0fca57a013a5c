"""The one close operation (INV-SES-005, INV-SES-006, INV-LV-007)."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

import httpx

from pin_sessions.platform.clock import FixedClock
from pin_sessions.platform.ids import new_id
from pin_sessions.platform.runtime import Runtime
from pin_sessions.user_activity.closing import close_sessions
from tests.conftest import T0
from tests.contracts.test_event_schemas import SESSION_ENDED_FIELDS
from tests.user_activity.conftest import device, outbox, sessions_of

START = "/api/user-activity/sessions/start"
HEARTBEAT = "/api/user-activity/sessions/heartbeat"
VIEWS = "/api/user-activity/property-views"


async def _session_with_views(
    http: httpx.AsyncClient, clock: FixedClock, anonymous_id: uuid.UUID
) -> tuple[uuid.UUID, list[str]]:
    """A session created at T0, a view at T0+1m, activity until T0+4m, a view at T0+4m."""
    started = (await http.post(START, headers=device(anonymous_id))).json()
    clock.advance(timedelta(minutes=1))
    early = (
        await http.post(
            VIEWS, headers=device(anonymous_id), json={"propertyObjectId": str(new_id())}
        )
    ).json()
    clock.advance(timedelta(minutes=3))
    late = (
        await http.post(
            VIEWS, headers=device(anonymous_id), json={"propertyObjectId": str(new_id())}
        )
    ).json()
    return uuid.UUID(started["sessionId"]), [early["viewId"], late["viewId"]]


async def test_closing_computes_the_duration_and_closes_open_views(
    http: httpx.AsyncClient, runtime: Runtime, clock: FixedClock
) -> None:
    anonymous_id = new_id()
    session_id, (early, late) = await _session_with_views(http, clock, anonymous_id)
    closed_at = T0 + timedelta(minutes=30)
    async with runtime.database.transaction() as conn:
        result = await close_sessions(conn, [session_id], now=closed_at)
    assert result.session_ids == (session_id,)
    assert result.views_closed == 2
    [row] = await sessions_of(runtime, anonymous_id)
    assert (row["status"], row["ended_at"], row["duration"]) == (
        "Inactive",
        closed_at,
        timedelta(minutes=4),
    )
    ended_views = {
        event["payload"]["ViewId"]: event
        for event in await outbox(runtime, "pin.user-activity.property-object-view-ended")
    }
    # A view ends at the session's last activity, never before it started.
    assert ended_views[early]["payload"]["EndedAt"] == "2026-11-29T12:04:00+00:00"
    assert ended_views[early]["payload"]["DurationSeconds"] == 180
    assert ended_views[late]["payload"]["DurationSeconds"] == 0
    assert ended_views[late]["aggregate_type"] == "PropertyObjectView"
    assert set(ended_views[early]["payload"]) == {
        "ViewId",
        "SessionId",
        "PropertyObjectId",
        "UserId",
        "StartedAt",
        "EndedAt",
        "DurationSeconds",
    }


async def test_the_session_ended_event_carries_exactly_the_seed_004_payload(
    http: httpx.AsyncClient, runtime: Runtime, clock: FixedClock
) -> None:
    anonymous_id = new_id()
    session_id, _ = await _session_with_views(http, clock, anonymous_id)
    async with runtime.database.transaction() as conn:
        await close_sessions(conn, [session_id], now=T0 + timedelta(hours=1))
    [event] = await outbox(runtime, "pin.user-activity.session-ended")
    assert event["topic"] == "pin.user-activity.session-ended.v1"
    assert (event["version"], event["aggregate_type"], event["aggregate_id"]) == (
        1,
        "Session",
        str(session_id),
    )
    assert event["payload"] == {
        "SessionId": str(session_id),
        "AnonymousId": str(anonymous_id),
        "UserId": None,
        "CreatedAt": "2026-11-29T12:00:00+00:00",
        "LastActivityAt": "2026-11-29T12:04:00+00:00",
        "DurationSeconds": 240,
    }


async def test_an_inactive_session_is_never_closed_twice(
    http: httpx.AsyncClient, runtime: Runtime, clock: FixedClock
) -> None:
    """INV-SES-006: racing closers publish one session-ended between them."""
    anonymous_id = new_id()
    session_id, _ = await _session_with_views(http, clock, anonymous_id)

    async def close() -> tuple[uuid.UUID, ...]:
        async with runtime.database.transaction() as conn:
            return (await close_sessions(conn, [session_id], now=clock.now())).session_ids

    results = await asyncio.gather(*(close() for _ in range(5)))
    assert sorted(results, key=len) == [(), (), (), (), (session_id,)]
    assert len(await outbox(runtime, "pin.user-activity.session-ended")) == 1
    assert len(await outbox(runtime, "pin.user-activity.property-object-view-ended")) == 2


async def test_a_heartbeat_that_committed_first_keeps_the_session_open(
    http: httpx.AsyncClient, runtime: Runtime, clock: FixedClock
) -> None:
    """The closer's threshold re-check lives in the close statement itself."""
    anonymous_id = new_id()
    session_id, _ = await _session_with_views(http, clock, anonymous_id)
    idle_before = clock.now()
    clock.advance(timedelta(seconds=1))
    await http.post(HEARTBEAT, headers=device(anonymous_id))
    async with runtime.database.transaction() as conn:
        result = await close_sessions(conn, [session_id], now=clock.now(), idle_before=idle_before)
    assert result.session_ids == ()
    [row] = await sessions_of(runtime, anonymous_id)
    assert row["status"] == "Active"
    assert await outbox(runtime, "pin.user-activity.session-ended") == []


async def test_many_sessions_close_in_one_call(http: httpx.AsyncClient, runtime: Runtime) -> None:
    devices = [new_id() for _ in range(10)]
    for anonymous_id in devices:
        await http.post(START, headers=device(anonymous_id))
    async with runtime.database.connection() as conn:
        ids = [row["id"] for row in await conn.fetch("select id from user_activity.sessions")]
    async with runtime.database.transaction() as conn:
        result = await close_sessions(conn, ids, now=T0)
    assert set(result.session_ids) == set(ids)
    assert len(await outbox(runtime, "pin.user-activity.session-ended")) == 10


async def test_a_bot_session_closes_with_its_session_ended_like_any_other(
    http: httpx.AsyncClient, runtime: Runtime, clock: FixedClock
) -> None:
    """Every session that closes publishes exactly one session-ended, a crawler's too; the
    event says nothing of the device."""
    bot, person = new_id(), new_id()
    crawler = {
        "X-Anonymous-Id": str(bot),
        "User-Agent": "Googlebot/2.1 (+http://www.google.com/bot.html)",
    }
    bot_session = (await http.post(START, headers=crawler)).json()["sessionId"]
    person_session = (await http.post(START, headers=device(person))).json()["sessionId"]
    async with runtime.database.transaction() as conn:
        result = await close_sessions(
            conn, [uuid.UUID(bot_session), uuid.UUID(person_session)], now=T0 + timedelta(hours=1)
        )
    assert len(result.session_ids) == 2
    [bot_row] = await sessions_of(runtime, bot)
    assert (bot_row["status"], bot_row["device_type"]) == ("Inactive", "Bot")
    ended = await outbox(runtime, "pin.user-activity.session-ended")
    assert sorted(event["payload"]["SessionId"] for event in ended) == sorted(
        [bot_session, person_session]
    )
    [bot_event] = [event for event in ended if event["payload"]["SessionId"] == bot_session]
    assert set(bot_event["payload"]) == SESSION_ENDED_FIELDS

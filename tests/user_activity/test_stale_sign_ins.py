"""SPEC §6: a sign-in event older than the device's current session changes nothing; with
§11, late events and stale tabs together still leave the device to the latest sign-in.

The events go through the real consumer on the built-in PostgreSQL bus; the messaging
suite runs the out-of-order cases over both buses.
"""

from __future__ import annotations

import json
from datetime import timedelta

import httpx
from prometheus_client import CollectorRegistry

from pin_sessions.platform.clock import FixedClock
from pin_sessions.platform.ids import new_id
from pin_sessions.platform.messaging.metrics import MessagingMetrics
from pin_sessions.platform.messaging.pgbus import PostgresBusConsumer
from pin_sessions.platform.messaging.runner import ConsumerRunner
from pin_sessions.platform.outbox import IntegrationEvent, append
from pin_sessions.platform.runtime import Runtime
from pin_sessions.user_activity.consumers import SignedInConsumer
from tests.conftest import T0, LogCapture
from tests.support.tokens import Tokens
from tests.user_activity.conftest import (
    UserFactory,
    device,
    outbox,
    sessions_of,
    sign_in_event,
)
from tests.user_activity.jobs.support import close_once

START = "/api/user-activity/sessions/start"
HEARTBEAT = "/api/user-activity/sessions/heartbeat"
LINK = "/api/user-activity/sessions/link"
ACTIONS = "/api/user-activity/actions"
STALE = "user_activity_stale_sign_ins_total"


async def _deliver_late(runtime: Runtime, *events: IntegrationEvent) -> None:
    """Write the events, then let the consumer catch up at the clock's current time."""
    async with runtime.database.transaction() as conn:
        for event in events:
            await append(conn, event, now=T0)
    metrics = MessagingMetrics.register(runtime.registry)
    runner = ConsumerRunner(
        SignedInConsumer(runtime.registry), runtime.database, runtime.clock, metrics
    )
    consumer = PostgresBusConsumer(runner, runtime.database, runtime.clock, metrics)
    await consumer.run_once(runtime.clock.now())


def _stale_count(runtime: Runtime) -> float:
    return runtime.registry.get_sample_value(STALE) or 0.0


async def test_a_sign_in_older_than_an_unlinked_session_leaves_it_a_guests(
    http: httpx.AsyncClient,
    runtime: Runtime,
    clock: FixedClock,
    captured_logs: LogCapture,
) -> None:
    """The device's session began after the sign-in: that sign-in is not who uses it now."""
    anonymous_id, user_id = new_id(), new_id()
    clock.advance(timedelta(minutes=5))
    started = (await http.post(START, headers=device(anonymous_id))).json()
    clock.advance(timedelta(minutes=5))
    await _deliver_late(runtime, sign_in_event(user_id, anonymous_id, T0 + timedelta(minutes=1)))
    [row] = await sessions_of(runtime, anonymous_id)
    assert (str(row["id"]), row["status"], row["user_id"]) == (started["sessionId"], "Active", None)
    assert await outbox(runtime, "pin.user-activity.session-linked") == []
    assert _stale_count(runtime) == 1
    [line] = [json.loads(line) for line in captured_logs.lines() if str(user_id) in line]
    assert line["event"] == "stale sign-in ignored"
    assert line["sessionId"] == started["sessionId"]
    assert str(anonymous_id) not in json.dumps(line)


async def test_a_late_sign_in_links_an_unlinked_session_now_for_the_sign_in_instant(
    http: httpx.AsyncClient, runtime: Runtime, clock: FixedClock
) -> None:
    """linked_at is when the consumer linked it; signed_in_at is when the user signed in,
    the key later sign-ins are ordered against."""
    anonymous_id, user_id = new_id(), new_id()
    await http.post(START, headers=device(anonymous_id))
    clock.advance(timedelta(minutes=10))
    await _deliver_late(runtime, sign_in_event(user_id, anonymous_id, T0 + timedelta(minutes=1)))
    [row] = await sessions_of(runtime, anonymous_id)
    assert (row["user_id"], row["signed_in_at"]) == (user_id, T0 + timedelta(minutes=1))
    assert row["linked_at"] == T0 + timedelta(minutes=10)
    [linked] = await outbox(runtime, "pin.user-activity.session-linked")
    assert linked["payload"]["LinkedAt"] == "2026-11-29T12:10:00+00:00"
    assert _stale_count(runtime) == 0


async def test_a_late_sign_in_of_another_user_opens_the_successor_now_for_its_instant(
    http: httpx.AsyncClient, runtime: Runtime, new_user: UserFactory, clock: FixedClock
) -> None:
    """The successor's span starts when the old one ends, so no minute is counted twice."""
    anonymous_id = new_id()
    first_user, second_user_id = await new_user(), new_id()
    await http.post(START, headers=device(anonymous_id, first_user))
    clock.advance(timedelta(minutes=5))
    await http.post("/api/user-activity/sessions/heartbeat", headers=device(anonymous_id))
    clock.advance(timedelta(minutes=5))
    signed_in_at = T0 + timedelta(minutes=2)
    await _deliver_late(runtime, sign_in_event(second_user_id, anonymous_id, signed_in_at))
    closed, current = await sessions_of(runtime, anonymous_id)
    assert (closed["status"], closed["ended_at"]) == ("Inactive", T0 + timedelta(minutes=10))
    assert closed["last_activity_at"] == T0 + timedelta(minutes=5)
    assert (current["status"], current["user_id"]) == ("Active", second_user_id)
    assert current["signed_in_at"] == signed_in_at
    assert current["linked_at"] == current["created_at"] == T0 + timedelta(minutes=10)
    assert current["last_activity_at"] == T0 + timedelta(minutes=10)
    assert len(await outbox(runtime, "pin.user-activity.session-ended")) == 1
    assert _stale_count(runtime) == 0


async def test_a_late_sign_in_of_the_devices_user_is_a_no_op_not_a_stale_one(
    http: httpx.AsyncClient, runtime: Runtime, new_user: UserFactory, clock: FixedClock
) -> None:
    """The client linked first (the usual case): the event it races is old, and harmless."""
    anonymous_id = new_id()
    user = await new_user()
    clock.advance(timedelta(minutes=1))
    await http.post(START, headers=device(anonymous_id, user))
    clock.advance(timedelta(minutes=1))
    await _deliver_late(runtime, sign_in_event(user.user_id, anonymous_id, T0))
    [row] = await sessions_of(runtime, anonymous_id)
    assert (row["status"], row["user_id"]) == ("Active", user.user_id)
    assert _stale_count(runtime) == 0


async def test_a_late_sign_in_takes_the_device_from_a_stale_tabs_restart(
    http: httpx.AsyncClient, runtime: Runtime, new_user: UserFactory, clock: FixedClock
) -> None:
    """SPEC §6 with §11: B signed in after A, but only B's event tells (B's client never
    linked). A's tab restarts the device's session before that event is consumed: the
    session is A's, linked at A's sign-in, so B's sign-in, later, is not stale."""
    anonymous_id = new_id()
    user_a = await new_user()
    await http.post(LINK, headers=device(anonymous_id, user_a))
    b_signed_in_at, user_b = T0 + timedelta(minutes=1), new_id()
    clock.advance(timedelta(minutes=17))
    assert (await close_once(runtime, CollectorRegistry())).count("closed") == 1
    refreshed = await Tokens.of(runtime).access(
        user_a.user_id, user_a.session_id, now=clock.now(), auth_time=T0
    )
    headers = device(anonymous_id) | {"Authorization": f"Bearer {refreshed}"}
    restarted = (await http.post(HEARTBEAT, headers=headers)).json()
    assert restarted["restarted"] is True

    clock.advance(timedelta(minutes=1))
    await _deliver_late(runtime, sign_in_event(user_b, anonymous_id, b_signed_in_at))
    _, a_restart, current = await sessions_of(runtime, anonymous_id)
    assert (str(a_restart["id"]), a_restart["user_id"]) == (restarted["sessionId"], user_a.user_id)
    assert (a_restart["status"], a_restart["signed_in_at"]) == ("Inactive", T0)
    assert (current["status"], current["user_id"]) == ("Active", user_b)
    assert current["signed_in_at"] == b_signed_in_at
    assert _stale_count(runtime) == 0


async def test_a_stale_tab_after_a_late_sign_in_leaves_the_device_to_the_later_user(
    http: httpx.AsyncClient, runtime: Runtime, new_user: UserFactory, clock: FixedClock
) -> None:
    """B's sign-in reached the device through the event alone; A's tab acts afterwards."""
    anonymous_id = new_id()
    user_a = await new_user()
    await http.post(LINK, headers=device(anonymous_id, user_a))
    user_b = new_id()
    clock.advance(timedelta(minutes=2))
    await _deliver_late(runtime, sign_in_event(user_b, anonymous_id, T0 + timedelta(minutes=1)))
    clock.advance(timedelta(minutes=1))
    action = await http.post(ACTIONS, headers=device(anonymous_id, user_a), json={"type": "x"})
    link = await http.post(LINK, headers=device(anonymous_id, user_a))
    closed, current = await sessions_of(runtime, anonymous_id)
    assert (closed["user_id"], closed["status"]) == (user_a.user_id, "Inactive")
    assert (current["user_id"], current["status"]) == (user_b, "Active")
    assert action.json()["sessionId"] == link.json()["sessionId"] == str(current["id"])
    assert link.json()["stale"] is True
    assert len(await outbox(runtime, "pin.user-activity.session-ended")) == 1

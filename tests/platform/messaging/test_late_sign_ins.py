"""SPEC §6 late events over both buses: sign-ins delivered late and out of order.

A sign-in older than the device's current session (its ``signed_in_at``, or ``created_at``
while unlinked) is stale: it changes nothing and is counted. Each case delivers the
sign-ins one at a time, in the order it names, well after they happened (the consumer
catching up), and checks the device's sessions and the session-ended events dev-stats
would count.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

from pin_sessions.platform.clock import FixedClock
from pin_sessions.platform.ids import new_id
from pin_sessions.platform.outbox import append
from pin_sessions.user_activity import linking, sessions
from pin_sessions.user_activity.consumers import SIGN_INS_TOPIC, SignedInConsumer
from pin_sessions.user_activity.domain import SignedInCaller, device_info
from pin_sessions.user_activity.events import SESSION_ENDED_TOPIC
from tests.conftest import T0
from tests.platform.messaging.pipeline import KAFKA, Pipeline, Renamed, eventually, sample
from tests.support.tokens import Tokens
from tests.user_activity.conftest import IPHONE, outbox, sessions_of, sign_in_event

CATCHING_UP_AT = T0 + timedelta(minutes=10)
A_SIGNED_IN_AT = T0 + timedelta(minutes=1)
B_SIGNED_IN_AT = T0 + timedelta(minutes=2)
# Two sign-ins within one second: A's, then B's half a second later.
A_IN_THE_SECOND = T0 + timedelta(minutes=1, milliseconds=200)
B_HALF_A_SECOND_LATER = A_IN_THE_SECOND + timedelta(milliseconds=500)
DEVICE = device_info(IPHONE, None)


class LateSignIns:
    """The identity-signed-in consumer on this bus, fed one sign-in at a time."""

    def __init__(self, pipeline: Pipeline) -> None:
        self.pipeline = pipeline
        self.topic = pipeline.topic(SIGN_INS_TOPIC)
        self.handler = Renamed(
            SignedInConsumer(pipeline.runtime.registry),
            consumer=pipeline.consumer_name("identity-signed-in"),
            topic=self.topic,
        )
        self.sent = 0

    def start(self) -> None:
        self.pipeline.start_consumers(self.handler)

    async def write(self, user_id: uuid.UUID, anonymous_id: uuid.UUID, at: datetime) -> None:
        event = sign_in_event(user_id, anonymous_id, at, topic=self.topic)
        async with self.pipeline.runtime.database.transaction() as conn:
            await append(conn, event, now=at)
        self.sent += 1

    async def applied(self) -> None:
        """Wait until every sign-in written so far has been applied."""
        runtime, consumer = self.pipeline.runtime, self.handler.consumer

        async def caught_up() -> bool:
            return sample(runtime, "pin_consumer_processed_total", consumer=consumer) >= self.sent

        await eventually(caught_up, tasks=self.pipeline.tasks)

    async def deliver(self, user_id: uuid.UUID, anonymous_id: uuid.UUID, at: datetime) -> None:
        await self.write(user_id, anonymous_id, at)
        await self.applied()

    def stale(self) -> float:
        return sample(self.pipeline.runtime, "user_activity_stale_sign_ins_total")


async def _guest_device(pipeline: Pipeline) -> tuple[uuid.UUID, uuid.UUID]:
    anonymous_id = new_id()
    started = await sessions.start_session(
        pipeline.runtime.database, anonymous_id, None, DEVICE, T0
    )
    return anonymous_id, started.session.id


async def _session_ended_events(pipeline: Pipeline) -> int:
    """How many session-ended events user-activity wrote: what dev-stats would count."""
    if pipeline.kind != KAFKA:
        return len(await outbox(pipeline.runtime, "pin.user-activity.session-ended"))
    # The relay deletes what the broker acknowledged: once nothing is left to send, its
    # per-topic count is every event written.
    database = pipeline.runtime.database

    async def all_sent() -> bool:
        async with database.connection() as conn:
            unsent: int = await conn.fetchval(
                "select count(*) from messaging.outbox where published_at is null"
            )
        return unsent == 0

    await eventually(all_sent, tasks=pipeline.tasks)
    return int(sample(pipeline.runtime, "pin_outbox_published_total", topic=SESSION_ENDED_TOPIC))


async def test_a_sign_in_delivered_after_a_later_users_link_closes_nothing(
    pipeline: Pipeline, clock: FixedClock
) -> None:
    """A signed in, then B, whose client linked the device; both events arrive after that."""
    runtime = pipeline.runtime
    anonymous_id, session_id = await _guest_device(pipeline)
    user_a, user_b = new_id(), new_id()
    sign_ins = LateSignIns(pipeline)
    await sign_ins.write(user_a, anonymous_id, A_SIGNED_IN_AT)
    await sign_ins.write(user_b, anonymous_id, B_SIGNED_IN_AT)
    b_link = T0 + timedelta(minutes=3)
    b_signed_in = SignedInCaller(user_b, B_SIGNED_IN_AT)
    await linking.link(runtime.database, anonymous_id, b_signed_in, DEVICE, b_link)

    clock.set(CATCHING_UP_AT)
    sign_ins.start()
    await sign_ins.applied()
    [row] = await sessions_of(runtime, anonymous_id)
    assert (row["id"], row["status"], row["user_id"]) == (session_id, "Active", user_b)
    assert row["signed_in_at"] == B_SIGNED_IN_AT  # B's token's auth_time
    assert await _session_ended_events(pipeline) == 0
    assert sign_ins.stale() == 1  # A's; B's own sign-in is a no-op, not a stale one


async def test_sign_ins_delivered_newest_first_leave_the_newest_user_and_close_nothing(
    pipeline: Pipeline, clock: FixedClock
) -> None:
    runtime = pipeline.runtime
    anonymous_id, session_id = await _guest_device(pipeline)
    user_a, user_b = new_id(), new_id()
    clock.set(CATCHING_UP_AT)
    sign_ins = LateSignIns(pipeline)
    sign_ins.start()
    await sign_ins.deliver(user_b, anonymous_id, B_SIGNED_IN_AT)
    await sign_ins.deliver(user_a, anonymous_id, A_SIGNED_IN_AT)
    [row] = await sessions_of(runtime, anonymous_id)
    assert (row["id"], row["status"], row["user_id"]) == (session_id, "Active", user_b)
    assert row["signed_in_at"] == B_SIGNED_IN_AT
    assert await _session_ended_events(pipeline) == 0
    assert sign_ins.stale() == 1


async def test_sign_ins_delivered_oldest_first_switch_once_to_the_newest_user(
    pipeline: Pipeline, clock: FixedClock
) -> None:
    """Linked at the sign-in's instant, not at processing: B's later event is not stale."""
    runtime = pipeline.runtime
    anonymous_id, session_id = await _guest_device(pipeline)
    user_a, user_b = new_id(), new_id()
    clock.set(CATCHING_UP_AT)
    sign_ins = LateSignIns(pipeline)
    sign_ins.start()
    await sign_ins.deliver(user_a, anonymous_id, A_SIGNED_IN_AT)
    await sign_ins.deliver(user_b, anonymous_id, B_SIGNED_IN_AT)
    closed, current = await sessions_of(runtime, anonymous_id)
    assert (closed["id"], closed["status"], closed["user_id"]) == (session_id, "Inactive", user_a)
    assert (current["status"], current["user_id"]) == ("Active", user_b)
    assert current["signed_in_at"] == B_SIGNED_IN_AT
    assert await _session_ended_events(pipeline) == 1
    assert sign_ins.stale() == 0


async def _link_by_token(
    pipeline: Pipeline, anonymous_id: uuid.UUID, user_id: uuid.UUID, signed_in_at: datetime
) -> linking.LinkOutcome:
    """The link route's work for a token of a sign-in at ``signed_in_at``, a second later:
    the instant it is judged by is the one the token carried through signing and verifying."""
    runtime, now = pipeline.runtime, signed_in_at + timedelta(seconds=1)
    user = await Tokens.of(runtime).verified_user(
        user_id, now=now, auth_time=signed_in_at, runtime=runtime
    )
    caller = SignedInCaller(user.user_id, user.signed_in_at)
    return await linking.link(runtime.database, anonymous_id, caller, DEVICE, now)


async def test_a_sign_in_half_a_second_before_a_linked_token_closes_nothing(
    pipeline: Pipeline, clock: FixedClock
) -> None:
    """A signs in; B signs in half a second later, in the same second, and links the device
    through the route; A's event, consumed after that, is the older sign-in: stale."""
    runtime = pipeline.runtime
    anonymous_id, session_id = await _guest_device(pipeline)
    user_a, user_b = new_id(), new_id()
    sign_ins = LateSignIns(pipeline)
    await sign_ins.write(user_a, anonymous_id, A_IN_THE_SECOND)
    linked = await _link_by_token(pipeline, anonymous_id, user_b, B_HALF_A_SECOND_LATER)
    assert not linked.stale

    clock.set(CATCHING_UP_AT)
    sign_ins.start()
    await sign_ins.applied()
    [row] = await sessions_of(runtime, anonymous_id)
    assert (row["id"], row["status"], row["user_id"]) == (session_id, "Active", user_b)
    assert row["signed_in_at"] == B_HALF_A_SECOND_LATER
    assert await _session_ended_events(pipeline) == 0
    assert sign_ins.stale() == 1


async def test_a_token_half_a_second_after_a_consumed_sign_in_takes_the_device(
    pipeline: Pipeline, clock: FixedClock
) -> None:
    """The other order: A's event is consumed first and links the device; B's token, of a
    sign-in half a second later, is the latest sign-in and switches the device to B."""
    runtime = pipeline.runtime
    anonymous_id, session_id = await _guest_device(pipeline)
    user_a, user_b = new_id(), new_id()
    clock.set(A_IN_THE_SECOND + timedelta(milliseconds=100))
    sign_ins = LateSignIns(pipeline)
    sign_ins.start()
    await sign_ins.deliver(user_a, anonymous_id, A_IN_THE_SECOND)
    linked = await _link_by_token(pipeline, anonymous_id, user_b, B_HALF_A_SECOND_LATER)
    assert (linked.stale, linked.switched) == (False, True)
    closed, current = await sessions_of(runtime, anonymous_id)
    assert (closed["id"], closed["status"], closed["user_id"]) == (session_id, "Inactive", user_a)
    assert (current["status"], current["user_id"]) == ("Active", user_b)
    assert current["signed_in_at"] == B_HALF_A_SECOND_LATER
    assert await _session_ended_events(pipeline) == 1
    assert sign_ins.stale() == 0

"""SPEC §10 in dev-stats: an erased user's facts keep their counts and durations, not the id.

Also a session-ended of the user that arrives after the erasure, and session-ended events
recorded at the same moment as the erasure by consumers on other connections.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta
from typing import Any

from prometheus_client import CollectorRegistry

from pin_sessions.dev_stats.consumers import SessionEndedConsumer, UserErasedConsumer
from pin_sessions.dev_stats.user_data import erase_user
from pin_sessions.platform.clock import FixedClock
from pin_sessions.platform.database import Database
from pin_sessions.platform.messaging.envelope import Message
from pin_sessions.platform.messaging.metrics import MessagingMetrics
from pin_sessions.platform.messaging.runner import ConsumerRunner, Outcome
from pin_sessions.platform.runtime import Runtime
from pin_sessions.user_activity.domain import EndedSession
from pin_sessions.user_activity.events import session_ended
from tests.conftest import T0
from tests.support.erasure import ERASURE_BATCH, as_delivered, deliver, user_erased_message
from tests.support.waiting import wait_until
from tests.user_activity.jobs.support import lock_waiters


def _ended(user_id: uuid.UUID | None, *, duration: int = 300) -> Message:
    event = session_ended(
        EndedSession(
            id=uuid.uuid4(),
            anonymous_id=uuid.uuid4(),
            user_id=user_id,
            created_at=T0,
            last_activity_at=T0 + timedelta(seconds=duration),
            duration=timedelta(seconds=duration),
        )
    )
    return as_delivered(event, T0)


async def _facts(runtime: Runtime) -> list[dict[str, Any]]:
    async with runtime.database.connection() as conn:
        rows = await conn.fetch(
            "select session_id, user_id, duration_seconds from dev_stats.session_facts"
        )
    return [dict(row) for row in rows]


async def _day(runtime: Runtime) -> tuple[int, int, int]:
    async with runtime.database.connection() as conn:
        row = await conn.fetchrow(
            "select guest_sessions, user_sessions, duration_seconds_sum "
            "from dev_stats.daily_sessions where day = $1",
            T0.date(),
        )
    assert row is not None
    return row["guest_sessions"], row["user_sessions"], row["duration_seconds_sum"]


async def test_the_users_facts_lose_the_id_and_keep_their_counts(
    runtime: Runtime, clock: FixedClock
) -> None:
    user, other = uuid.uuid4(), uuid.uuid4()
    for message in (_ended(user), _ended(user, duration=60), _ended(other), _ended(None)):
        assert await deliver(runtime, SessionEndedConsumer(), message) is Outcome.APPLIED
    day_before = await _day(runtime)

    erasure = user_erased_message(user, clock.now())
    assert await deliver(runtime, UserErasedConsumer(ERASURE_BATCH), erasure) is Outcome.APPLIED

    facts = await _facts(runtime)
    assert len(facts) == 4
    assert sorted(str(f["user_id"]) for f in facts) == sorted(["None", "None", "None", str(other)])
    assert sorted(f["duration_seconds"] for f in facts) == [60, 300, 300, 300]
    assert await _day(runtime) == day_before == (1, 3, 960)
    assert await deliver(runtime, UserErasedConsumer(ERASURE_BATCH), erasure) is Outcome.DUPLICATE


async def test_a_late_session_of_an_erased_user_counts_as_a_users_without_the_id(
    runtime: Runtime, clock: FixedClock
) -> None:
    user = uuid.uuid4()
    await deliver(
        runtime, UserErasedConsumer(ERASURE_BATCH), user_erased_message(user, clock.now())
    )

    assert await deliver(runtime, SessionEndedConsumer(), _ended(user)) is Outcome.APPLIED

    [fact] = await _facts(runtime)
    assert fact["user_id"] is None
    assert await _day(runtime) == (0, 1, 300)


async def test_sessions_recorded_during_the_erasure_keep_no_id(
    runtime: Runtime, clock: FixedClock, database_url: str
) -> None:
    """Four consumers' connections record the user's sessions while the erasure runs."""
    user = uuid.uuid4()
    for _ in range(30):
        await deliver(runtime, SessionEndedConsumer(), _ended(user))
    recorders = Database(database_url, max_size=4)
    await recorders.open()
    runner = ConsumerRunner(
        SessionEndedConsumer(), recorders, clock, MessagingMetrics.register(CollectorRegistry())
    )

    async def record(count: int) -> None:
        for _ in range(count):
            assert await runner.process(_ended(user)) is Outcome.APPLIED

    try:
        await asyncio.gather(
            erase_user(runtime.database, user, clock.now(), batch_size=3),
            *(record(10) for _ in range(4)),
        )
    finally:
        await recorders.close()

    facts = await _facts(runtime)
    assert len(facts) == 70
    assert [f for f in facts if f["user_id"] is not None] == []
    assert await _day(runtime) == (0, 70, 70 * 300)


async def test_a_session_being_recorded_when_the_erasure_starts_is_waited_for(
    runtime: Runtime, clock: FixedClock, database_url: str
) -> None:
    """The recording transaction has checked for a tombstone and written the fact, and has
    not committed: the erasure waits for it, then clears its fact too."""
    user = uuid.uuid4()
    recorder = Database(database_url, max_size=1)
    await recorder.open()
    try:
        async with recorder.transaction() as conn:
            await SessionEndedConsumer().handle(conn, _ended(user), clock.now())
            erasing = asyncio.create_task(
                erase_user(runtime.database, user, clock.now(), batch_size=ERASURE_BATCH)
            )

            async def blocked_or_done() -> bool:
                return erasing.done() or await lock_waiters(runtime) > 0

            await wait_until(blocked_or_done, timeout=60, interval=0.01)
        await erasing
    finally:
        await recorder.close()

    [fact] = await _facts(runtime)
    assert fact["user_id"] is None

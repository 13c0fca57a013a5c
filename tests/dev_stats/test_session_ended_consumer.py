"""dev-stats-session-ended: first seen by SessionId and by MessageId (seed 004)."""

from __future__ import annotations

import uuid

from pin_sessions.dev_stats.consumers import SessionEndedConsumer
from pin_sessions.platform.messaging.envelope import Message
from pin_sessions.platform.messaging.metrics import MessagingMetrics
from pin_sessions.platform.messaging.runner import ConsumerRunner, Outcome
from pin_sessions.platform.runtime import Runtime
from tests.conftest import T0


def _message(session_id: uuid.UUID, *, duration: int = 120) -> Message:
    return Message(
        message_id=uuid.uuid4(),
        topic="pin.user-activity.session-ended.v1",
        event_type="pin.user-activity.session-ended",
        version=1,
        aggregate_type="Session",
        aggregate_id=str(session_id),
        created_at=T0,
        payload={
            "SessionId": str(session_id),
            "AnonymousId": str(uuid.uuid4()),
            "UserId": None,
            "CreatedAt": T0.isoformat(),
            "LastActivityAt": T0.isoformat(),
            "DurationSeconds": duration,
        },
    )


def _runner(runtime: Runtime) -> ConsumerRunner:
    metrics = MessagingMetrics.register(runtime.registry)
    return ConsumerRunner(SessionEndedConsumer(), runtime.database, runtime.clock, metrics)


async def _durations(runtime: Runtime) -> list[int]:
    async with runtime.database.connection() as conn:
        rows = await conn.fetch("select duration_seconds from dev_stats.session_facts")
    return [row["duration_seconds"] for row in rows]


async def test_a_redelivered_message_is_counted_once(runtime: Runtime) -> None:
    runner, message = _runner(runtime), _message(uuid.uuid4())
    assert await runner.process(message) is Outcome.APPLIED
    assert await runner.process(message) is Outcome.DUPLICATE
    assert await _durations(runtime) == [120]


async def test_a_second_publication_for_the_same_session_keeps_the_first_fact(
    runtime: Runtime,
) -> None:
    runner, session_id = _runner(runtime), uuid.uuid4()
    await runner.process(_message(session_id, duration=120))
    assert await runner.process(_message(session_id, duration=999)) is Outcome.APPLIED
    assert await _durations(runtime) == [120]


async def test_a_payload_that_breaks_the_contract_is_parked(runtime: Runtime) -> None:
    runner = ConsumerRunner(
        SessionEndedConsumer(),
        runtime.database,
        runtime.clock,
        MessagingMetrics.register(runtime.registry),
        max_attempts=2,
        retry_delay_seconds=0,
    )
    assert await runner.process(_message(uuid.uuid4(), duration=-5)) is Outcome.DEAD_LETTERED
    assert await _durations(runtime) == []
    async with runtime.database.connection() as conn:
        error = await conn.fetchval("select error from messaging.dead_letters")
    assert "a duration lies in 0" in error  # refused before SQL: it has no bucket

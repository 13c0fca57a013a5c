"""A crash between the effect and recording progress: a duplicate, never a loss (SPEC §6).

Kafka: the relay is killed (SIGKILL) after the broker acknowledged a batch and before it
marked the rows sent. PostgreSQL bus: the consumer is killed after its effects committed
and before it moved its position. Either way the batch arrives again, and the consumer's
first-seen rows apply it once.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess

from pin_sessions.dev_stats.consumers import SessionEndedConsumer
from pin_sessions.platform.messaging.runner import Handler
from pin_sessions.platform.outbox import append
from tests.platform.messaging.pipeline import (
    KAFKA,
    Pipeline,
    Renamed,
    eventually,
    sample,
    session_ended,
)
from tests.support.paused_delivery import PAUSED
from tests.support.processes import python_module

EVENTS = 20


def _wait_for_pause(process: subprocess.Popen[str]) -> None:
    assert process.stderr is not None
    seen: list[str] = []
    for line in process.stderr:
        if PAUSED in line:
            return
        seen.append(line)
    tail = "".join(seen[-20:])
    raise AssertionError(f"process exited ({process.wait()}) before reaching the pause: {tail}")


async def _kill_inside_the_window(*args: str, env: dict[str, str]) -> None:
    """Run the role as its own process, and SIGKILL it once it waits to record progress."""
    process = python_module("tests.support.paused_delivery", *args, env=env)
    try:
        await asyncio.wait_for(asyncio.to_thread(_wait_for_pause, process), timeout=120)
        process.send_signal(signal.SIGKILL)
    finally:
        process.kill()
        process.wait()


async def _count(pipeline: Pipeline, query: str) -> int:
    async with pipeline.runtime.database.connection() as conn:
        count: int = await conn.fetchval(query)
    return count


async def test_a_crash_before_recording_progress_redelivers_and_the_consumer_applies_once(
    pipeline: Pipeline, settings_env: dict[str, str]
) -> None:
    topic = pipeline.topic("pin.user-activity.session-ended.v1")
    async with pipeline.runtime.database.transaction() as conn:
        for _ in range(EVENTS):
            await append(conn, session_ended(topic), now=pipeline.runtime.clock.now())
    handler = SessionEndedConsumer()
    consumer: Handler
    if pipeline.kind == KAFKA:
        assert pipeline.broker is not None
        env = {**settings_env, **pipeline.broker.env()}
        await _kill_inside_the_window("relay", env=env)
        unsent = "select count(*) from messaging.outbox where published_at is null"
        assert await _count(pipeline, unsent) == EVENTS  # acknowledged, yet never marked
        consumer = Renamed(handler, consumer=pipeline.consumer_name("dev-stats"), topic=topic)
        pipeline.start_consumers(consumer)
    else:
        await _kill_inside_the_window("consume", handler.consumer, env=settings_env)
        facts = "select count(*) from dev_stats.session_facts"
        assert await _count(pipeline, facts) == EVENTS  # applied, yet the position never moved
        assert await _count(pipeline, "select count(*) from messaging.bus_positions") == 0
        consumer = handler
        pipeline.start_consumers(consumer)

    def seen(metric: str) -> float:
        return sample(pipeline.runtime, metric, consumer=consumer.consumer)

    async def every_duplicate_seen() -> bool:
        return seen("pin_consumer_duplicates_total") >= EVENTS

    await eventually(every_duplicate_seen, tasks=pipeline.tasks)
    assert await _count(pipeline, "select count(*) from dev_stats.session_facts") == EVENTS
    if pipeline.kind == KAFKA:
        assert seen("pin_consumer_processed_total") == EVENTS

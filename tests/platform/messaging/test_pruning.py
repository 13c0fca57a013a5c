"""The PostgreSQL bus deletes the outbox rows every consumer has passed, a chunk at a time
(``platform.batching.until_short``), within the pass's pruning budget."""

from __future__ import annotations

import uuid

from pin_sessions.platform.messaging.metrics import MessagingMetrics
from pin_sessions.platform.messaging.pgbus import PostgresBusConsumer
from pin_sessions.platform.messaging.runner import ConsumerRunner
from pin_sessions.platform.outbox import append_all
from pin_sessions.platform.runtime import Runtime
from tests.platform.messaging.pipeline import CREATE_APPLIED, RecordingHandler, thing

TOPIC = "pin.test.things.v1"
ROWS = 7
CHUNK = 2


async def bus_with_passed_rows(runtime: Runtime, *, budget_seconds: float) -> PostgresBusConsumer:
    """A bus consumer, the only one, that has just read and applied ``ROWS`` rows."""
    async with runtime.database.transaction() as conn:
        await conn.execute(CREATE_APPLIED)
        aggregate = uuid.uuid4()
        await append_all(
            conn, [thing(TOPIC, aggregate, seq) for seq in range(ROWS)], now=runtime.clock.now()
        )
    metrics = MessagingMetrics.register(runtime.registry)
    runner = ConsumerRunner(
        RecordingHandler("test-things", TOPIC), runtime.database, runtime.clock, metrics
    )
    return PostgresBusConsumer(
        runner,
        runtime.database,
        runtime.clock,
        metrics,
        all_consumers=["test-things"],
        batch_size=ROWS + 1,
        prune_batch_size=CHUNK,
        prune_budget_seconds=budget_seconds,
    )


async def outbox_rows(runtime: Runtime) -> int:
    async with runtime.database.connection() as conn:
        count: int = await conn.fetchval("select count(*) from messaging.outbox")
    return count


async def test_a_pass_deletes_every_passed_row_a_chunk_at_a_time_until_one_is_short(
    runtime: Runtime,
) -> None:
    # A budget no chunk of two rows comes near: the chunks end because one came back short.
    bus = await bus_with_passed_rows(runtime, budget_seconds=3600)

    await bus.run_once(runtime.clock.now())

    assert await outbox_rows(runtime) == 0


async def test_a_spent_pruning_budget_leaves_the_rest_to_the_next_pass(runtime: Runtime) -> None:
    # No budget: one chunk, never none; delivery goes on, and the next pass that reads
    # messages prunes on.
    bus = await bus_with_passed_rows(runtime, budget_seconds=0)

    await bus.run_once(runtime.clock.now())

    assert await outbox_rows(runtime) == ROWS - CHUNK

"""A primary failover while the relay is mid-batch, on a real primary and synchronous standby
and a real Kafka broker: nothing in the outbox is lost, and each aggregate's events reach
Kafka in the order they were written. A batch the broker acknowledged but the dead primary
never marked sent goes again: a duplicate, allowed by at-least-once delivery."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections import defaultdict

import asyncpg
from confluent_kafka import Consumer
from prometheus_client import CollectorRegistry

from pin_sessions.bootstrap.database import build_runtime, worker_database
from pin_sessions.platform.clock import FixedClock
from pin_sessions.platform.messaging.metrics import MessagingMetrics
from pin_sessions.platform.messaging.relay import OutboxRelay
from pin_sessions.platform.outbox import append_all
from pin_sessions.settings import load_settings
from tests.conftest import T0
from tests.platform.messaging.pipeline import thing
from tests.support.failover import ServerPair
from tests.support.kafka import KafkaCluster
from tests.support.waiting import wait_until

AGGREGATES = 40
EVENTS_EACH = 50
BATCH = 100
RECOVERY_TIMEOUT = 60.0
UNSENT = "select count(*) from messaging.outbox where published_at is null"


async def test_a_failover_while_the_relay_is_mid_batch_loses_nothing_and_keeps_the_order(
    pair: ServerPair, kafka_broker: KafkaCluster, settings_env: dict[str, str]
) -> None:
    topic = f"pin.test.failover.{uuid.uuid4().hex[:10]}.v1"
    url = pair.url()
    settings = load_settings({**settings_env, "PIN_DATABASE_URL": url})
    runtime = build_runtime(settings, url, clock=FixedClock(T0), registry=CollectorRegistry())
    aggregates = [uuid.uuid4() for _ in range(AGGREGATES)]
    database = worker_database(settings, url)
    await database.open()
    stop = asyncio.Event()
    try:
        async with database.transaction() as conn:
            events = [
                thing(topic, aggregate, seq)
                for seq in range(EVENTS_EACH)
                for aggregate in aggregates
            ]
            await append_all(conn, events, now=T0)
        relay = OutboxRelay(
            database,
            runtime.clock,
            MessagingMetrics.register(CollectorRegistry()),
            kafka_broker.bootstrap,
            batch_size=BATCH,
            idle_seconds=0.02,
            message_timeout_ms=5000,
        )
        relaying = asyncio.create_task(relay.run(stop))
        total = AGGREGATES * EVENTS_EACH
        await wait_until(
            lambda: _unsent_at_most(pair.primary.admin_dsn(), total - 2 * BATCH), timeout=60
        )
        with pair.primary_frozen():
            pair.kill_primary()
        pair.promote_standby()
        await wait_until(
            lambda: _unsent_at_most(pair.standby.admin_dsn(), 0),
            timeout=RECOVERY_TIMEOUT,
            interval=0.2,
        )
        stop.set()
        await relaying
    finally:
        stop.set()
        await database.close()

    records = await asyncio.to_thread(_read, kafka_broker, topic, total)
    seen: dict[str, list[int]] = defaultdict(list)
    for key, seq in records:
        seen[key].append(seq)
    assert set(seen) == {str(aggregate) for aggregate in aggregates}
    for sequence in seen.values():
        firsts = list(dict.fromkeys(sequence))  # a resent batch repeats, never reorders
        assert firsts == list(range(EVENTS_EACH))
        assert _in_order_with_repeats(sequence)


def _in_order_with_repeats(sequence: list[int]) -> bool:
    """Each event is the next new one or a repeat of one already sent (a resent batch)."""
    highest = -1
    for seq in sequence:
        if seq > highest + 1:
            return False
        highest = max(highest, seq)
    return True


async def _unsent_at_most(dsn: str, count: int) -> bool:
    try:
        conn = await asyncpg.connect(dsn, timeout=2)
    except (OSError, asyncpg.PostgresError):
        return False
    try:
        unsent: int = await conn.fetchval(UNSENT)
    except (OSError, asyncpg.PostgresError):
        return False
    finally:
        await conn.close()
    return unsent <= count


def _read(broker: KafkaCluster, topic: str, count: int) -> list[tuple[str, int]]:
    """Every record of the topic, (key, Seq), in each partition's order."""
    reader = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "enable.partition.eof": False,
            "session.timeout.ms": 6000,
        }
    )
    reader.subscribe([topic])
    records: list[tuple[str, int]] = []
    try:
        for _ in range(600):
            for record in reader.consume(1000, 0.2):
                if record.error() is None:
                    key = (record.key() or b"").decode()
                    records.append((key, json.loads(record.value() or b"{}")["Seq"]))
            if len({(key, seq) for key, seq in records}) >= count:
                break
    finally:
        reader.close()
    return records

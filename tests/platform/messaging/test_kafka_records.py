"""What the relay puts on Kafka, read back with a plain Kafka client (SPEC §6)."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections import defaultdict

import pytest
from confluent_kafka import Consumer, Message
from confluent_kafka.admin import AdminClient, ConfigResource  # type: ignore[attr-defined]

from pin_sessions.platform.outbox import append
from tests.conftest import T0
from tests.platform.messaging.pipeline import KAFKA, Pipeline, eventually, thing
from tests.support.kafka import KafkaCluster

METADATA_HEADERS = {
    "MessageId",
    "EventType",
    "Version",
    "CreatedAt",
    "AggregateId",
    "AggregateType",
}


def _read_all(broker: KafkaCluster, topic: str, count: int) -> list[Message]:
    reader = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500,
        }
    )
    reader.subscribe([topic])
    records: list[Message] = []
    try:
        for _ in range(600):
            records += [r for r in reader.consume(500, 0.2) if r.error() is None]
            if len(records) >= count:
                break
    finally:
        reader.close()
    return records


@pytest.mark.parametrize("bus", [KAFKA])
async def test_topics_get_six_partitions_one_replica_on_one_broker_and_each_key_one_partition(
    pipeline: Pipeline, kafka_broker: KafkaCluster
) -> None:
    topic = pipeline.topic()
    aggregates = [uuid.uuid4() for _ in range(24)]
    events = [thing(topic, aggregate, seq) for seq in range(3) for aggregate in aggregates]
    async with pipeline.runtime.database.transaction() as conn:
        for event in events:
            await append(conn, event, now=T0)
    pipeline.start(pipeline.relay())

    async def all_sent() -> bool:
        async with pipeline.runtime.database.connection() as conn:
            return not await conn.fetchval("select count(*) from messaging.outbox")

    await eventually(all_sent, tasks=pipeline.tasks)
    admin = AdminClient({"bootstrap.servers": kafka_broker.bootstrap})
    partitions = admin.list_topics(timeout=10).topics[topic].partitions
    assert len(partitions) == 6
    # No replication factor set (the relay's default policy): a one-broker Kafka gets 1
    # replica and min.insync.replicas 1, not a refusal of production's 3.
    assert {len(partition.replicas) for partition in partitions.values()} == {1}
    [config] = admin.describe_configs([ConfigResource("topic", topic)]).values()
    assert config.result(timeout=30)["min.insync.replicas"].value == "1"

    records = await asyncio.to_thread(_read_all, kafka_broker, topic, len(events))
    assert len(records) == len(events)
    partitions_of_key: dict[bytes, set[int]] = defaultdict(set)
    for record in records:
        key = record.key()
        assert isinstance(key, bytes)
        partitions_of_key[key].add(record.partition() or 0)
    assert all(len(partitions) == 1 for partitions in partitions_of_key.values())
    assert len({p for partitions in partitions_of_key.values() for p in partitions}) > 1

    sent = {str(event.message_id): event for event in events}
    for record in records:
        headers = _headers(record)
        assert set(headers) - {"traceparent"} == METADATA_HEADERS
        event = sent[headers["MessageId"]]
        assert record.key() == str(event.aggregate_id).encode()
        assert headers["EventType"] == event.event_type
        assert headers["Version"] == "1"
        assert headers["AggregateId"] == str(event.aggregate_id)
        assert headers["AggregateType"] == "Thing"
        assert headers["CreatedAt"] == T0.isoformat()
        # The value is the flat payload alone: the metadata travels only in the headers.
        assert json.loads(record.value() or b"") == {
            "ThingId": str(event.aggregate_id),
            "Seq": event.payload["Seq"],
        }


def _headers(record: Message) -> dict[str, str]:
    raw: list[tuple[str, bytes | None]] = record.headers() or []  # type: ignore[assignment]
    return {name: (value or b"").decode() for name, value in raw}

"""A Kafka broker for the test process, and the ``pipeline`` fixture run once per bus."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from pin_sessions.platform.database import Database
from pin_sessions.platform.messaging.metrics import MessagingMetrics
from pin_sessions.platform.runtime import Runtime
from tests.platform.messaging.pipeline import CREATE_APPLIED, KAFKA, POSTGRES, Pipeline
from tests.platform.messaging.proxy import CuttableProxy
from tests.support.kafka import KafkaCluster


@pytest.fixture(scope="session")
def kafka_broker() -> Iterator[KafkaCluster]:
    """One Apache Kafka node, started the first time a test of this process asks for it and
    shared by all (each test has its own topics and groups); a broker that cannot start fails
    the Kafka cases, it never skips them."""
    broker = KafkaCluster()
    try:
        broker.start()
    except BaseException:
        broker.stop()
        raise
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture(params=[POSTGRES, KAFKA])
def bus(request: pytest.FixtureRequest) -> str:
    kind: str = request.param
    return kind


@pytest.fixture
async def pipeline(
    bus: str, runtime: Runtime, database_url: str, request: pytest.FixtureRequest
) -> AsyncIterator[Pipeline]:
    broker = request.getfixturevalue("kafka_broker") if bus == KAFKA else None
    async with runtime.database.connection() as conn:
        await conn.execute(CREATE_APPLIED)
    metrics = MessagingMetrics.register(runtime.registry)
    if broker is not None:
        pipeline = Pipeline(bus, runtime, broker, metrics, runtime.database, None)
        try:
            yield pipeline
        finally:
            await pipeline.close()
        return
    proxy = CuttableProxy(database_url)
    consumer_database = Database(await proxy.start(), max_size=4)
    await consumer_database.open()
    pipeline = Pipeline(bus, runtime, None, metrics, consumer_database, proxy)
    try:
        yield pipeline
    finally:
        await pipeline.close()
        await proxy.close()
        await consumer_database.close()

"""The shared suite's harness: the same cases over the PostgreSQL bus and over Kafka."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from pin_sessions.platform.database import Connection, Database
from pin_sessions.platform.messaging.envelope import Message
from pin_sessions.platform.messaging.kafka import KafkaConsumer
from pin_sessions.platform.messaging.metrics import MessagingMetrics
from pin_sessions.platform.messaging.pgbus import PostgresBusConsumer
from pin_sessions.platform.messaging.relay import OutboxRelay
from pin_sessions.platform.messaging.runner import ConsumerRunner, Handler, PreparingHandler
from pin_sessions.platform.outbox import IntegrationEvent
from pin_sessions.platform.process import Role
from pin_sessions.platform.runtime import Runtime
from tests.conftest import T0
from tests.platform.messaging.proxy import CuttableProxy
from tests.support.kafka import KafkaCluster
from tests.support.waiting import wait_until

POSTGRES, KAFKA = "postgres", "kafka"

CREATE_APPLIED = """
create table if not exists public.test_applied (
    id bigint generated always as identity primary key,
    consumer text not null,
    message_id uuid not null,
    aggregate_id text not null,
    seq int not null
)
"""

INSERT_APPLIED = """
insert into public.test_applied (consumer, message_id, aggregate_id, seq) values ($1, $2, $3, $4)
"""


class RecordingHandler:
    """Records every application; refuses payloads marked ``Poison``."""

    version = 1

    def __init__(self, consumer: str, topic: str) -> None:
        self.consumer = consumer
        self.topic = topic

    async def handle(self, conn: Connection, message: Message, now: datetime) -> None:
        if message.payload.get("Poison"):
            raise ValueError("this payload can never be applied")
        await conn.execute(
            INSERT_APPLIED,
            self.consumer,
            message.message_id,
            message.aggregate_id,
            message.payload["Seq"],
        )


@dataclass
class Renamed:
    """A real handler under a per-test consumer (group) and topic name, for the shared broker."""

    inner: Handler
    consumer: str
    topic: str
    version: int = 1

    async def handle(self, conn: Connection, message: Message, now: datetime) -> None:
        await self.inner.handle(conn, message, now)


@dataclass
class RenamedPreparing(Renamed):
    """``Renamed`` for a handler that does its bulk before the message's transaction."""

    inner: PreparingHandler

    async def prepare(self, database: Database, message: Message, now: datetime) -> None:
        await self.inner.prepare(database, message, now)


def thing(
    topic: str, aggregate_id: uuid.UUID, seq: int, *, poison: bool = False
) -> IntegrationEvent:
    payload: dict[str, Any] = {"ThingId": aggregate_id, "Seq": seq}
    if poison:
        payload["Poison"] = True
    return IntegrationEvent(
        topic=topic,
        event_type="pin.test.thing-happened",
        version=1,
        aggregate_type="Thing",
        aggregate_id=aggregate_id,
        payload=payload,
    )


@dataclass
class Pipeline:
    """Roles of one bus running in the test's event loop."""

    kind: str
    runtime: Runtime
    broker: KafkaCluster | None
    metrics: MessagingMetrics
    # PostgreSQL-bus consumers reach the database through this proxy (bus away = cut it).
    consumer_database: Database
    proxy: CuttableProxy | None
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    suffix: str = field(default_factory=lambda: uuid.uuid4().hex[:10])

    @property
    def bootstrap(self) -> str:
        assert self.broker is not None
        return self.broker.bootstrap

    def topic(self, name: str = "pin.test.things.v1") -> str:
        """Unique per test on Kafka, whose broker the whole session shares."""
        return f"{name}.{self.suffix}" if self.kind == KAFKA else name

    def consumer_name(self, name: str = "test-things") -> str:
        return f"{name}-{self.suffix}"

    def runner(self, handler: Handler, *, max_attempts: int = 3) -> ConsumerRunner:
        return ConsumerRunner(
            handler,
            self.consumer_database,
            self.runtime.clock,
            self.metrics,
            max_attempts=max_attempts,
            retry_delay_seconds=0.01,
        )

    def consumer(
        self, handler: Handler, *, max_attempts: int = 3, client_debug: str | None = None
    ) -> Role:
        """``client_debug``: librdkafka's ``debug`` contexts, logged to stderr (which pytest
        shows when the test fails)."""
        runner = self.runner(handler, max_attempts=max_attempts)
        if self.kind == KAFKA:
            return KafkaConsumer(
                runner,
                self.bootstrap,
                self.metrics,
                session_timeout_ms=6000,
                options={"debug": client_debug} if client_debug else None,
            )
        return PostgresBusConsumer(
            runner, self.consumer_database, self.runtime.clock, self.metrics, idle_seconds=0.02
        )

    def relay(self) -> OutboxRelay:
        return OutboxRelay(
            self.runtime.database,
            self.runtime.clock,
            self.metrics,
            self.bootstrap,
            idle_seconds=0.02,
            message_timeout_ms=5000,
        )

    def start(self, *roles: Role) -> None:
        for role in roles:
            self.tasks.append(asyncio.create_task(role.run(self.stop), name=role.name))

    def start_consumers(
        self, *handlers: Handler, max_attempts: int = 3, client_debug: str | None = None
    ) -> None:
        """The handlers' consumers, and on Kafka the relay that feeds them."""
        self.start(
            *(
                self.consumer(handler, max_attempts=max_attempts, client_debug=client_debug)
                for handler in handlers
            )
        )
        if self.kind == KAFKA:
            self.start(self.relay())

    async def close(self) -> None:
        self.stop.set()
        await asyncio.gather(*self.tasks)

    @contextlib.asynccontextmanager
    async def bus_away(self, seconds: float) -> AsyncIterator[None]:
        """Kafka: the broker process stopped; PostgreSQL bus: the consumers' database cut off."""
        if self.broker is not None:
            self.broker.freeze()
        else:
            assert self.proxy is not None
            self.proxy.cut()
        try:
            yield
            await asyncio.sleep(seconds)
        finally:
            if self.broker is not None:
                self.broker.thaw()
            else:
                assert self.proxy is not None
                self.proxy.restore()

    def print_group_log(self, group: str) -> None:
        """The broker's log lines on ``group`` (its coordinator's joins, rebalances and
        expirations), printed for a failed test's report."""
        if self.broker is None:
            return
        for node in self.broker.nodes:
            if node.log.exists():
                lines = node.log.read_text(errors="replace").splitlines()
                print(*(line for line in lines if group in line), sep="\n")

    async def applied(self, consumer: str) -> list[tuple[str, int, uuid.UUID]]:
        async with self.runtime.database.connection() as conn:
            rows = await conn.fetch(
                "select aggregate_id, seq, message_id from public.test_applied "
                "where consumer = $1 order by id",
                consumer,
            )
        return [(row["aggregate_id"], row["seq"], row["message_id"]) for row in rows]


async def eventually(
    check: Callable[[], Awaitable[bool]], *, timeout: float = 90.0, tasks: Sequence[Any] = ()
) -> None:
    """Wait until ``check`` holds; a role that died meanwhile fails the test at once."""

    async def holds() -> bool:
        for task in tasks:
            if task.done():
                task.result()
                raise AssertionError(f"role {task.get_name()} stopped early")
        return await check()

    await wait_until(holds, timeout=timeout)


def sample(runtime: Runtime, metric: str, **labels: str) -> float:
    return runtime.registry.get_sample_value(metric, labels) or 0.0


def session_ended(
    topic: str, *, duration_seconds: int = 300, user_id: uuid.UUID | None = None
) -> IntegrationEvent:
    """Seed 004's payload, as user-activity writes it."""
    session_id = uuid.uuid4()
    return IntegrationEvent(
        topic=topic,
        event_type="pin.user-activity.session-ended",
        version=1,
        aggregate_type="Session",
        aggregate_id=session_id,
        payload={
            "SessionId": session_id,
            "AnonymousId": uuid.uuid4(),
            "UserId": user_id,
            "CreatedAt": T0,
            "LastActivityAt": T0 + timedelta(seconds=duration_seconds),
            "DurationSeconds": duration_seconds,
        },
    )

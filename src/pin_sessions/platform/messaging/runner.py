"""What every consumer shares, whichever bus delivers to it (SPEC §6, STYLE 12).

At least once in, exactly one effect out: the first-seen row ``(consumer, MessageId)`` is
written in the same transaction as the handler's effect, so a redelivered message finds it
and is skipped. A handler whose effect is too large for one transaction (an erased user's
rows) does the bulk in ``prepare``, in bounded transactions of its own that are safe to
repeat, before the message's transaction records it. A handler that keeps failing gets its
message parked in ``messaging.dead_letters`` with the error, and the consumer moves on. A
database that is away is not the message's fault: that error goes up, and the bus delivers
again later.
"""

from __future__ import annotations

import asyncio
import enum
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, runtime_checkable

import asyncpg
import structlog
from opentelemetry import trace
from opentelemetry.trace import Tracer

from pin_sessions.platform.clock import Clock
from pin_sessions.platform.database import Connection, Database
from pin_sessions.platform.errors import ServiceUnavailable
from pin_sessions.platform.messaging.envelope import Message
from pin_sessions.platform.messaging.metrics import MessagingMetrics
from pin_sessions.platform.messaging.tracing import process_span

log = structlog.get_logger(__name__)

INSERT_PROCESSED = """
insert into messaging.processed_messages (consumer, message_id, processed_at)
values ($1, $2, $3)
on conflict do nothing
"""

INSERT_DEAD_LETTER = """
insert into messaging.dead_letters
    (consumer, message_id, topic, event_type, version, aggregate_id, payload, headers, error,
     attempts, dead_lettered_at)
values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
on conflict do nothing
"""

SELECT_PROCESSED_BY = """
select p.consumer, p.processed_at,
       exists (select 1 from messaging.dead_letters as d
               where d.consumer = p.consumer and d.message_id = p.message_id) as parked
from messaging.processed_messages as p
where p.message_id = $1 and p.consumer = any($2::text[])
"""

# Failures of the store itself, not of the message: never a reason to park it.
_UNAVAILABLE = (
    ServiceUnavailable,
    OSError,
    asyncpg.PostgresConnectionError,
    asyncpg.InterfaceError,
    asyncpg.CannotConnectNowError,
)


class Handler(Protocol):
    """A context's consumer: decode the payload and call its operation on ``conn``."""

    consumer: str
    topic: str
    version: int

    async def handle(self, conn: Connection, message: Message, now: datetime) -> None: ...


@runtime_checkable
class PreparingHandler(Handler, Protocol):
    """A handler with work to do before the message's transaction, in transactions of its own.

    ``prepare`` may run several times for one message (a retry, a redelivery, a batch that
    falls back to one by one), so it must be idempotent; ``handle`` then finishes in the
    message's transaction.
    """

    async def prepare(self, database: Database, message: Message, now: datetime) -> None: ...


class Outcome(enum.Enum):
    APPLIED = "applied"
    DUPLICATE = "duplicate"
    DEAD_LETTERED = "dead-lettered"


class ConsumerRunner:
    """Applies messages to one handler: dedup, retries, dead letters, version warnings."""

    def __init__(
        self,
        handler: Handler,
        database: Database,
        clock: Clock,
        metrics: MessagingMetrics,
        *,
        max_attempts: int = 5,
        retry_delay_seconds: float = 0.1,
        tracer: Tracer | None = None,
    ) -> None:
        self.handler = handler
        self._database = database
        self._clock = clock
        self._metrics = metrics
        self._max_attempts = max_attempts
        self._retry_delay = retry_delay_seconds
        self._tracer = tracer or trace.get_tracer(__name__)

    @property
    def consumer(self) -> str:
        return self.handler.consumer

    async def process_all(self, messages: Sequence[Message]) -> None:
        """Apply a batch in one transaction; if any message fails, each goes on its own.

        One commit for many messages is what lets a consumer keep up; the fallback keeps
        a poison message from holding its neighbours back.
        """
        if len(messages) > 1:
            try:
                await self._apply_all(messages)
                return
            except _UNAVAILABLE:
                raise
            except Exception as exc:
                log.info(
                    "batch failed, applying one by one", consumer=self.consumer, error=repr(exc)
                )
        for message in messages:
            await self.process(message)

    async def process(self, message: Message) -> Outcome:
        """Apply one message, retrying; park it after the last failed try."""
        error: Exception | None = None
        for attempt in range(1, self._max_attempts + 1):
            try:
                return await self._apply(message)
            except _UNAVAILABLE:
                raise
            except Exception as exc:
                error = exc
                self._metrics.failed.labels(self.consumer).inc()
                log.warning(
                    "handler failed",
                    consumer=self.consumer,
                    messageId=str(message.message_id),
                    attempt=attempt,
                    error=repr(exc),
                )
                if attempt < self._max_attempts:
                    await asyncio.sleep(self._retry_delay * 2 ** (attempt - 1))
        assert error is not None
        await self._park(message, error)
        return Outcome.DEAD_LETTERED

    async def _prepare(self, messages: Sequence[Message], now: datetime) -> None:
        if isinstance(self.handler, PreparingHandler):
            for message in messages:
                await self.handler.prepare(self._database, message, now)

    async def _apply(self, message: Message) -> Outcome:
        await self._prepare([message], self._clock.now())
        async with self._database.transaction() as conn:
            outcome = await self._apply_in(conn, message, self._clock.now())
        self._count(outcome)
        return outcome

    async def _apply_all(self, messages: Sequence[Message]) -> None:
        now = self._clock.now()
        await self._prepare(messages, now)
        async with self._database.transaction() as conn:
            outcomes = [await self._apply_in(conn, message, now) for message in messages]
        for outcome in outcomes:
            self._count(outcome)

    async def _apply_in(self, conn: Connection, message: Message, now: datetime) -> Outcome:
        """The first-seen row and the effect, on the caller's transaction, in the event's trace."""
        with process_span(self._tracer, self.consumer, message) as span:
            outcome = await self._apply_traced(conn, message, now)
            span.set_attribute("pin.consumer.outcome", outcome.value)
        return outcome

    async def _apply_traced(self, conn: Connection, message: Message, now: datetime) -> Outcome:
        status = await conn.execute(INSERT_PROCESSED, self.consumer, message.message_id, now)
        if status == "INSERT 0 0":
            return Outcome.DUPLICATE
        if message.version != self.handler.version:
            # SPEC §6: no upcasting; the contract is additive, so carry on with what we know.
            log.warning(
                "unexpected event version",
                consumer=self.consumer,
                messageId=str(message.message_id),
                version=message.version,
                expected=self.handler.version,
            )
        await self.handler.handle(conn, message, now)
        return Outcome.APPLIED

    def _count(self, outcome: Outcome) -> None:
        counter = (
            self._metrics.processed if outcome is Outcome.APPLIED else self._metrics.duplicates
        )
        counter.labels(self.consumer).inc()

    async def _park(self, message: Message, error: Exception) -> None:
        now = self._clock.now()
        async with self._database.transaction() as conn:
            await conn.execute(
                INSERT_DEAD_LETTER,
                self.consumer,
                message.message_id,
                message.topic,
                message.event_type,
                message.version,
                message.aggregate_id,
                message.payload,
                message.headers(),
                repr(error),
                self._max_attempts,
                now,
            )
            # Parked counts as seen: a redelivery must not run the failing handler again.
            await conn.execute(INSERT_PROCESSED, self.consumer, message.message_id, now)
        self._metrics.dead_lettered.labels(self.consumer).inc()
        log.error(
            "message dead-lettered",
            consumer=self.consumer,
            messageId=str(message.message_id),
            topic=message.topic,
            attempts=self._max_attempts,
            error=repr(error),
        )


@dataclass(frozen=True)
class Processed:
    at: datetime
    parked: bool  # dead-lettered, not applied


async def processed_by(
    conn: Connection, message_id: uuid.UUID, consumers: Sequence[str]
) -> dict[str, Processed]:
    """Which of ``consumers`` have applied or parked the message, and when."""
    rows = await conn.fetch(SELECT_PROCESSED_BY, message_id, list(consumers))
    return {row["consumer"]: Processed(row["processed_at"], row["parked"]) for row in rows}

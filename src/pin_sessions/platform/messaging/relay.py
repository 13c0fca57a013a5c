"""``pin-sessions relay``: outbox rows → Kafka (SPEC §6 delivery rules).

* One relay works at a time (a PostgreSQL advisory lock); the others stand by, so several
  relays never reorder an aggregate's events.
* Rows are read in position order and only below the snapshot's xmin, so a row of a
  transaction still open is published once it commits, never skipped nor overtaken by a
  later row of its aggregate.
* A row is marked sent only after the broker acknowledged it (idempotent producer,
  ``acks=all``); a crash in between sends it again: a duplicate, never a loss.
* Sent rows are deleted a bounded chunk at a time, until a chunk comes back short or
  the pass's pruning budget is spent (``platform.batching``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from datetime import datetime
from functools import partial
from typing import Any

import structlog
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient
from opentelemetry import trace
from opentelemetry.trace import Span, Tracer

from pin_sessions.platform.batching import rows_affected, until_short
from pin_sessions.platform.clock import Clock
from pin_sessions.platform.database import Connection, Database
from pin_sessions.platform.messaging.envelope import Message, from_outbox_row
from pin_sessions.platform.messaging.kafka import admin_config, producer_config
from pin_sessions.platform.messaging.kafka_admin import (
    ClientErrors,
    TopicPolicy,
    ensure_topics,
    missing_topic_refusal,
)
from pin_sessions.platform.messaging.loop import PRUNE_BUDGET_SECONDS, prune_deadline, run_passes
from pin_sessions.platform.messaging.metrics import MessagingMetrics
from pin_sessions.platform.messaging.tracing import end_publish_span, publish_span, record_headers

log = structlog.get_logger(__name__)

READER = "relay"
LOCK_CLASS = 0x5052  # "PR"
LOCK_KEY = 1

TRY_LOCK = "select pg_try_advisory_lock($1, $2)"
UNLOCK = "select pg_advisory_unlock($1, $2)"

SELECT_UNSENT = """
select position, message_id, topic, event_type, version, aggregate_type, aggregate_id,
       payload, headers, created_at
from messaging.outbox
where published_at is null
  and txid < pg_snapshot_xmin(pg_current_snapshot())
order by position
limit $1
"""

MARK_SENT = """
update messaging.outbox set published_at = $2 where position = any($1::bigint[])
"""

DELETE_SENT = """
delete from messaging.outbox where position in (
    select position from messaging.outbox
    where published_at is not null
    order by position
    limit $1
)
"""

SELECT_BACKLOG = """
select count(*) as pending, min(created_at) as oldest
from messaging.outbox where published_at is null
"""


class BrokerUnavailable(Exception):
    """Some rows of a batch were not acknowledged; they stay unsent for the next pass."""


class OutboxRelay:
    """Role: publishes the outbox to Kafka until ``stop``."""

    name = "relay"

    def __init__(
        self,
        database: Database,
        clock: Clock,
        metrics: MessagingMetrics,
        bootstrap_servers: str,
        *,
        batch_size: int = 500,
        prune_batch_size: int = 1000,
        prune_budget_seconds: float = PRUNE_BUDGET_SECONDS,
        idle_seconds: float = 0.1,
        message_timeout_ms: int = 10_000,
        tracer: Tracer | None = None,
        options: Mapping[str, str] | None = None,
        topic_policy: TopicPolicy | None = None,
    ) -> None:
        self._database = database
        self._clock = clock
        self._metrics = metrics
        self._options = options or {}
        self._errors = ClientErrors(self.name, self._options)
        self._config = {
            **producer_config(
                bootstrap_servers, self._options, message_timeout_ms=message_timeout_ms
            ),
            "error_cb": self._errors,
        }
        self._admin = AdminClient(
            admin_config(bootstrap_servers, self._options), error_cb=self._errors
        )
        self._topic_policy = topic_policy or TopicPolicy()
        self._producer: Producer | None = None
        self._known_topics: set[str] = set()
        self._batch_size = batch_size
        self._prune_batch_size = prune_batch_size
        self._prune_budget_seconds = prune_budget_seconds
        self._idle_seconds = idle_seconds
        self._tracer = tracer or trace.get_tracer(__name__)

    async def run(self, stop: asyncio.Event) -> None:
        log.info("relay started")
        try:
            await run_passes(
                self.name,
                self.run_once,
                stop,
                self._clock,
                idle_seconds=self._idle_seconds,
                max_backoff_seconds=5.0,
            )
        finally:
            if self._producer is not None:
                await asyncio.to_thread(self._producer.flush, 2.0)
        log.info("relay stopped")

    async def run_once(self, now: datetime) -> bool:
        """Publish one batch; True when a full batch went out (more is likely waiting)."""
        async with self._database.connection() as conn:
            if not await conn.fetchval(TRY_LOCK, LOCK_CLASS, LOCK_KEY):
                return False  # another relay is the active one
            try:
                return await self._batch(conn, now)
            finally:
                await conn.execute(UNLOCK, LOCK_CLASS, LOCK_KEY)

    async def _batch(self, conn: Connection, now: datetime) -> bool:
        rows = await conn.fetch(SELECT_UNSENT, self._batch_size)
        if rows:
            messages = [(row["position"], from_outbox_row(row)) for row in rows]
            acked, failed, error = await self._publish(messages)
            if acked:
                await conn.execute(MARK_SENT, acked, self._clock.now())
                await until_short(
                    partial(self._prune, conn),
                    size=self._prune_batch_size,
                    deadline=prune_deadline(self._prune_budget_seconds),
                )
            if failed:
                raise BrokerUnavailable(f"{failed} of {len(rows)} rows not acknowledged: {error}")
        await self._observe(conn, now)
        return len(rows) == self._batch_size

    async def _prune(self, conn: Connection) -> int:
        """One chunk of sent rows deleted (its own statement, committed): how many."""
        return rows_affected(await conn.execute(DELETE_SENT, self._prune_batch_size))

    async def _publish(
        self, messages: list[tuple[int, Message]]
    ) -> tuple[list[int], int, KafkaError | None]:
        """Send and wait for every report: (acknowledged positions, failures, last error)."""
        new_topics = {message.topic for _, message in messages} - self._known_topics
        if new_topics:
            try:
                not_allowed = await asyncio.to_thread(
                    ensure_topics, self._admin, new_topics, self._topic_policy
                )
            finally:
                self._admin.poll(0)  # serves error_cb: a refusal stops the role, not a retry
                self._errors.raise_if_refused()
            if not_allowed:
                raise missing_topic_refusal(not_allowed, self._options)
            self._known_topics |= new_topics
        producer = self._ensure_producer()
        reports: dict[int, KafkaError | None] = {}
        spans: list[Span] = []
        for position, message in messages:
            span = publish_span(self._tracer, message)
            spans.append(span)
            producer.produce(
                message.topic,
                key=message.aggregate_id.encode(),
                value=message.value(),
                headers=record_headers(message, span),
                on_delivery=_reporter(reports, position),
            )
        # Short slices keep a stop request from waiting behind one long blocking flush;
        # message.timeout.ms bounds the whole wait, since every message then gets a report.
        while len(reports) < len(messages):
            await asyncio.to_thread(producer.flush, 0.2)
            self._errors.raise_if_refused()
        acked: list[int] = []
        failures = 0
        last_error: KafkaError | None = None
        for (position, message), span in zip(messages, spans, strict=True):
            error = reports[position]
            end_publish_span(span, error)
            if error is None:
                acked.append(position)
                self._metrics.published.labels(message.topic).inc()
            else:
                failures += 1
                last_error = error
                self._metrics.publish_failed.labels(message.topic).inc()
        if failures:
            # After a timed-out batch an idempotent producer's sequence state is suspect
            # (brokers may fence it); a fresh producer starts a clean session.
            self._producer = None
        return acked, failures, last_error

    def _ensure_producer(self) -> Producer:
        if self._producer is None:
            self._producer = Producer(self._config)
        return self._producer

    async def _observe(self, conn: Connection, now: datetime) -> None:
        backlog = await conn.fetchrow(SELECT_BACKLOG)
        assert backlog is not None
        self._metrics.outbox_pending.labels(READER).set(backlog["pending"])
        oldest = backlog["oldest"]
        lag = (now - oldest).total_seconds() if oldest is not None else 0.0
        self._metrics.outbox_lag.labels(READER).set(max(lag, 0.0))


def _reporter(
    reports: dict[int, KafkaError | None], position: int
) -> Callable[[KafkaError | None, Any], None]:
    def on_delivery(error: KafkaError | None, _record: Any) -> None:
        reports[position] = error

    return on_delivery

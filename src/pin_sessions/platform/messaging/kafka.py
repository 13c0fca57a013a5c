"""Kafka plumbing: client settings, topic creation, and the Kafka-fed consumer role.

Offsets are committed by hand, and only once a batch's effects (or dead letters) are
committed in PostgreSQL; after a failure the client is rebuilt, so it resumes from the
last commit and nothing in between is skipped.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping
from typing import Any

import structlog
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from pin_sessions.platform.messaging.envelope import (
    MalformedMessage,
    Message,
    from_kafka_record,
)
from pin_sessions.platform.messaging.kafka_admin import ClientErrors, TopicPolicy, ensure_topics
from pin_sessions.platform.messaging.metrics import MessagingMetrics
from pin_sessions.platform.messaging.runner import ConsumerRunner
from pin_sessions.platform.process import RoleCannotRun, wait_or_stop

log = structlog.get_logger(__name__)


class ClientOptionsRejected(ValueError):
    """librdkafka refused a connection option (``PIN_KAFKA__*``); ``str()`` names it."""


def admin_config(bootstrap_servers: str, options: Mapping[str, str]) -> dict[str, Any]:
    """Every client gets the connection options (TLS, SASL) besides its own properties."""
    return {"bootstrap.servers": bootstrap_servers, **options}


def check_client_options(bootstrap_servers: str, options: Mapping[str, str]) -> None:
    """Build a client as the roles will, so a value librdkafka refuses (a certificate file
    that is no PEM, a property this build lacks) stops the process at start, not in a retry
    loop. Nothing connects: the client is closed before it needs the broker."""
    try:
        # Quiet: librdkafka would print the same refusal, and connection attempts, itself.
        AdminClient({**admin_config(bootstrap_servers, options), "log_level": 0})
    except KafkaException as exc:
        raise ClientOptionsRejected(_name_the_setting(exc.args[0].str())) from None


def _name_the_setting(message: str) -> str:
    # librdkafka says e.g. "ssl.ca.location failed: ..." or
    # 'Invalid value "x" for configuration property "security.protocol"'.
    for prop in re.findall(r"\b((?:sasl|ssl|security)\.[a-z.]+)", message):
        return f"PIN_KAFKA__{prop.replace('.', '_').upper()} is refused by librdkafka: {message}"
    return f"PIN_KAFKA__* is refused by librdkafka: {message}"


def producer_config(
    bootstrap_servers: str, options: Mapping[str, str], *, message_timeout_ms: int
) -> dict[str, Any]:
    return {
        **admin_config(bootstrap_servers, options),
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 5,
        # Keys land on the partitions Java clients would pick for them.
        "partitioner": "murmur2_random",
        # Past this the delivery report says failed; the row stays unsent and is retried.
        "message.timeout.ms": message_timeout_ms,
        "client.id": "pin-sessions-relay",
    }


def consumer_config(
    bootstrap_servers: str, options: Mapping[str, str], group: str, *, session_timeout_ms: int
) -> dict[str, Any]:
    return {
        **admin_config(bootstrap_servers, options),
        "group.id": group,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "fetch.wait.max.ms": 100,
        # A group (re)forms within about this long: a member joining or leaving waits for it.
        "session.timeout.ms": session_timeout_ms,
        "heartbeat.interval.ms": max(session_timeout_ms // 10, 100),
        "client.id": f"pin-sessions-{group}",
    }


class KafkaConsumer:
    """Role: feeds one handler from its topic, in a consumer group named after it."""

    def __init__(
        self,
        runner: ConsumerRunner,
        bootstrap_servers: str,
        metrics: MessagingMetrics,
        *,
        batch_size: int = 200,
        poll_seconds: float = 0.2,
        session_timeout_ms: int = 10_000,
        options: Mapping[str, str] | None = None,
        topic_policy: TopicPolicy | None = None,
    ) -> None:
        self.name = f"consume.{runner.consumer}"
        self._runner = runner
        options = options or {}
        self._errors = ClientErrors(self.name, options)
        self._config = {
            **consumer_config(
                bootstrap_servers, options, runner.consumer, session_timeout_ms=session_timeout_ms
            ),
            "error_cb": self._errors,
        }
        self._admin = AdminClient(admin_config(bootstrap_servers, options), error_cb=self._errors)
        self._topic_policy = topic_policy or TopicPolicy()
        self._metrics = metrics
        self._batch_size = batch_size
        self._poll_seconds = poll_seconds

    async def run(self, stop: asyncio.Event) -> None:
        log.info("consumer started", consumer=self._runner.consumer, bus="kafka")
        backoff = 0.5
        while not stop.is_set():
            client = Consumer(self._config)
            try:
                if await self._topic_exists():
                    client.subscribe([self._runner.handler.topic])
                    while not stop.is_set():
                        await self.run_once(client)
                        backoff = 0.5
            except RoleCannotRun:
                raise
            except Exception as exc:
                log.warning("consumer pass failed, reconnecting", error=str(exc), retryIn=backoff)
                self._admin.poll(0)  # serves error_cb: a refusal stops the role, not a retry
                self._errors.raise_if_refused()
            finally:
                await asyncio.to_thread(client.close)
            await wait_or_stop(stop, backoff)
            backoff = min(backoff * 2, 5.0)
        log.info("consumer stopped", consumer=self._runner.consumer)

    async def _topic_exists(self) -> bool:
        """Subscribing to a topic that does not exist yet leaves the member without partitions
        until a metadata refresh (minutes); so the topic is made first, or, when this principal
        may only read it, awaited until the relay makes it."""
        topic = self._runner.handler.topic
        not_allowed = await asyncio.to_thread(
            ensure_topics, self._admin, [topic], self._topic_policy
        )
        if not_allowed:
            log.info("waiting for the topic", consumer=self._runner.consumer, topic=topic)
        return not not_allowed

    async def run_once(self, client: Consumer) -> int:
        """Apply one polled batch and commit its offsets; returns how many records it held."""
        records = await asyncio.to_thread(client.consume, self._batch_size, self._poll_seconds)
        self._errors.raise_if_refused()
        if records and (errors := self._errors.take_seen()):
            log.info("consumer receiving again", consumer=self.name, clientErrors=errors)
        messages: list[Message] = []
        next_offsets: dict[tuple[str, int], int] = {}
        for record in records:
            error = record.error()
            if error is not None:
                if error.code() != KafkaError._PARTITION_EOF:
                    raise KafkaException(error)
                continue
            topic, partition, offset = record.topic(), record.partition(), record.offset()
            assert topic is not None and partition is not None and offset is not None
            next_offsets[(topic, partition)] = offset + 1
            message = self._decode(record)
            if message is not None:
                messages.append(message)
        if next_offsets:
            # Records come in partition order, hence in each aggregate's order.
            await self._runner.process_all(messages)
            offsets = [TopicPartition(t, p, offset) for (t, p), offset in next_offsets.items()]
            await asyncio.to_thread(client.commit, offsets=offsets, asynchronous=False)
        return len(records)

    def _decode(self, record: Any) -> Message | None:
        try:
            return from_kafka_record(record.topic(), record.headers(), record.value())
        except MalformedMessage as exc:
            # Without a MessageId there is nothing to dedup or park by; count it and go on.
            self._metrics.dead_lettered.labels(self._runner.consumer).inc()
            log.error("malformed record skipped", consumer=self._runner.consumer, error=str(exc))
            return None

"""Events as consumers receive them (a user-erased one above all), and applying one the way
a bus does."""

from __future__ import annotations

import json
import uuid
from datetime import datetime

from prometheus_client import CollectorRegistry

from pin_sessions.identity.events import user_erased
from pin_sessions.platform.messaging.envelope import Message
from pin_sessions.platform.messaging.metrics import MessagingMetrics
from pin_sessions.platform.messaging.runner import ConsumerRunner, Handler, Outcome
from pin_sessions.platform.outbox import IntegrationEvent, to_json_value
from pin_sessions.platform.runtime import Runtime
from pin_sessions.settings import ConsumersSettings

# Rows per erasure transaction where a test does not choose: the setting's default.
ERASURE_BATCH = ConsumersSettings().erasure_batch_size


def user_erased_message(user_id: uuid.UUID, erased_at: datetime) -> Message:
    """Identity's event as a bus hands it over."""
    return as_delivered(user_erased(user_id, erased_at), erased_at)


def as_delivered(event: IntegrationEvent, created_at: datetime) -> Message:
    """An event as a consumer receives it: its payload decoded from JSON, as a bus does."""
    return Message(
        message_id=event.message_id,
        topic=event.topic,
        event_type=event.event_type,
        version=event.version,
        aggregate_type=event.aggregate_type,
        aggregate_id=str(event.aggregate_id),
        created_at=created_at,
        payload=json.loads(json.dumps(dict(event.payload), default=to_json_value)),
    )


async def deliver(runtime: Runtime, handler: Handler, message: Message) -> Outcome:
    """One delivery through the consumer runner: dedup, prepare, the message's transaction."""
    metrics = MessagingMetrics.register(CollectorRegistry())
    return await ConsumerRunner(handler, runtime.database, runtime.clock, metrics).process(message)

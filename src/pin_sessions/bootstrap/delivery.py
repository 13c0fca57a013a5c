"""Event delivery: the consumers, on Kafka or the PostgreSQL bus, and the outbox relay."""

from __future__ import annotations

from collections.abc import Callable

from pin_sessions.dev_stats.consumers import SessionEndedConsumer
from pin_sessions.dev_stats.consumers import UserErasedConsumer as DevStatsUserErasedConsumer
from pin_sessions.identity import events as identity_events
from pin_sessions.platform.erasure import USER_ERASED_TOPIC
from pin_sessions.platform.messaging.kafka import KafkaConsumer
from pin_sessions.platform.messaging.kafka_admin import TopicPolicy
from pin_sessions.platform.messaging.metrics import MessagingMetrics
from pin_sessions.platform.messaging.pgbus import PostgresBusConsumer
from pin_sessions.platform.messaging.relay import OutboxRelay
from pin_sessions.platform.messaging.runner import ConsumerRunner, Handler
from pin_sessions.platform.process import Role
from pin_sessions.platform.runtime import Runtime
from pin_sessions.settings import KafkaSettings
from pin_sessions.user_activity import events as user_activity_events
from pin_sessions.user_activity.consumers import SignedInConsumer
from pin_sessions.user_activity.consumers import UserErasedConsumer as ActivityUserErasedConsumer

# `pin-sessions consume NAME` runs one of these; `up` runs them all. Each is built once per
# process, from the runtime: its registry for a handler's own metrics, its settings.
CONSUMERS: dict[str, Callable[[Runtime], Handler]] = {
    "identity-signed-in": lambda runtime: SignedInConsumer(runtime.registry),
    "dev-stats-session-ended": lambda runtime: SessionEndedConsumer(),
    "user-activity-user-erased": lambda runtime: ActivityUserErasedConsumer(
        runtime.settings.consumers.erasure_batch_size
    ),
    "dev-stats-user-erased": lambda runtime: DevStatsUserErasedConsumer(
        runtime.settings.consumers.erasure_batch_size
    ),
}


# Every topic the contexts publish to (SPEC §6): the relay creates the missing ones at start,
# and its principal may write these and no other (SPEC §11, deploy/kubernetes/kafka-users.yaml).
PUBLISHED_TOPICS = (
    identity_events.SIGN_INS_TOPIC,
    identity_events.SESSION_REVOKED_TOPIC,
    USER_ERASED_TOPIC,
    user_activity_events.SESSION_LINKED_TOPIC,
    user_activity_events.SESSION_ENDED_TOPIC,
    user_activity_events.PROPERTY_OBJECT_VIEW_ENDED_TOPIC,
)


def topic_policy(kafka: KafkaSettings) -> TopicPolicy:
    return TopicPolicy(kafka.replication_factor)


def build_consumer(runtime: Runtime, name: str, metrics: MessagingMetrics) -> Role:
    """The consumer on Kafka when PIN_KAFKA_BOOTSTRAP_SERVERS is set, else on the PostgreSQL bus."""
    handler = CONSUMERS[name](runtime)
    runner = ConsumerRunner(handler, runtime.database, runtime.clock, metrics)
    bootstrap_servers = runtime.settings.kafka_bootstrap_servers
    batches = runtime.settings.consumers
    if bootstrap_servers:
        kafka = runtime.settings.kafka
        return KafkaConsumer(
            runner,
            bootstrap_servers,
            metrics,
            batch_size=batches.batch_size,
            options=kafka.librdkafka_options(),
            topic_policy=topic_policy(kafka),
        )
    return PostgresBusConsumer(
        runner,
        runtime.database,
        runtime.clock,
        metrics,
        all_consumers=sorted(CONSUMERS),
        batch_size=batches.batch_size,
        prune_batch_size=batches.prune_batch_size,
    )


def build_relay(runtime: Runtime, metrics: MessagingMetrics) -> OutboxRelay:
    bootstrap_servers = runtime.settings.kafka_bootstrap_servers
    if not bootstrap_servers:
        raise ValueError("the relay needs PIN_KAFKA_BOOTSTRAP_SERVERS")
    return OutboxRelay(
        runtime.database,
        runtime.clock,
        metrics,
        bootstrap_servers,
        batch_size=runtime.settings.relay.batch_size,
        prune_batch_size=runtime.settings.relay.prune_batch_size,
        options=runtime.settings.kafka.librdkafka_options(),
        topic_policy=topic_policy(runtime.settings.kafka),
    )


def build_delivery_roles(runtime: Runtime) -> list[Role]:
    """Every consumer, plus the relay when Kafka is configured, on the runtime's registry."""
    metrics = MessagingMetrics.register(runtime.registry)
    roles = [build_consumer(runtime, name, metrics) for name in CONSUMERS]
    if runtime.settings.kafka_bootstrap_servers:
        roles.append(build_relay(runtime, metrics))
    return roles

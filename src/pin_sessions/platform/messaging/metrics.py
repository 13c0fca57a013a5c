"""Prometheus metrics of delivery, registered once per registry and shared by every role."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge


@dataclass(frozen=True)
class MessagingMetrics:
    """``reader`` is ``relay`` or a PostgreSQL-bus consumer: whoever has rows still to pass."""

    outbox_pending: Gauge
    outbox_lag: Gauge
    published: Counter
    publish_failed: Counter
    processed: Counter
    duplicates: Counter
    failed: Counter
    dead_lettered: Counter

    @classmethod
    def register(cls, registry: CollectorRegistry) -> MessagingMetrics:
        return cls(
            outbox_pending=Gauge(
                "pin_outbox_pending",
                "Outbox rows the reader has not passed yet",
                ["reader"],
                registry=registry,
            ),
            outbox_lag=Gauge(
                "pin_outbox_lag_seconds",
                "Age of the oldest outbox row the reader has not passed yet (0 when none)",
                ["reader"],
                registry=registry,
            ),
            published=Counter(
                "pin_outbox_published_total",
                "Outbox rows the broker acknowledged",
                ["topic"],
                registry=registry,
            ),
            publish_failed=Counter(
                "pin_outbox_publish_failed_total",
                "Outbox rows the broker did not acknowledge (retried later)",
                ["topic"],
                registry=registry,
            ),
            processed=Counter(
                "pin_consumer_processed_total",
                "Messages whose effect a consumer committed",
                ["consumer"],
                registry=registry,
            ),
            duplicates=Counter(
                "pin_consumer_duplicates_total",
                "Redelivered messages a consumer had already applied",
                ["consumer"],
                registry=registry,
            ),
            failed=Counter(
                "pin_consumer_failed_total",
                "Failed tries of a consumer's handler",
                ["consumer"],
                registry=registry,
            ),
            dead_lettered=Counter(
                "pin_consumer_dead_lettered_total",
                "Messages parked in messaging.dead_letters after the last try",
                ["consumer"],
                registry=registry,
            ),
        )

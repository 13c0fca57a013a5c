"""The relay's producer guarantees: ``acks=all`` (an event is acknowledged only once every
in-sync replica has it, so losing the partition's leader loses no acknowledged event) and
idempotence (a retried send after a lost acknowledgement is written once, in order). No
``PIN_KAFKA__*`` option can turn either off: the delivery rules depend on both."""

from __future__ import annotations

from confluent_kafka import Producer

from pin_sessions.platform.messaging.kafka import producer_config

BROKERS = "127.0.0.1:9"
WEAKER = {"acks": "1", "enable.idempotence": "false", "max.in.flight.requests.per.connection": "5"}


def test_the_relays_producer_waits_for_every_in_sync_replica_and_is_idempotent() -> None:
    config = producer_config(BROKERS, {}, message_timeout_ms=30_000)
    assert config["acks"] == "all"
    assert config["enable.idempotence"] is True


def test_connection_options_cannot_weaken_the_guarantees() -> None:
    config = producer_config(BROKERS, WEAKER, message_timeout_ms=30_000)
    assert (config["acks"], config["enable.idempotence"]) == ("all", True)
    # librdkafka accepts the result as one consistent configuration.
    Producer(config).flush(0)

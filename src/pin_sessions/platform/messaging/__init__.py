"""Delivering the outbox (SPEC §6).

* :mod:`.relay` — ``OutboxRelay``: outbox rows → Kafka, marked sent only after the ack.
* :mod:`.pgbus` — ``PostgresBusConsumer``: the built-in bus; a consumer reads the outbox
  log itself, keeping its own durable position.
* :mod:`.kafka` — ``KafkaConsumer``: a consumer reading Kafka with its own group.
* :mod:`.runner` — ``ConsumerRunner``: what every consumer shares, whichever bus feeds it —
  first-seen dedup in the handler's transaction, retries, dead letters, version warnings.
"""

"""What a Kafka role checks before and while it works: may it connect, do its topics exist.

* :func:`check_access` — one metadata request as the role will connect. A password the
  broker refuses, or a broker certificate the configured authorities do not trust, raises
  :class:`KafkaAccessRefused`, whose ``str()`` is one line naming the setting (SPEC §11);
  librdkafka itself would retry such a connection forever.
* :class:`ClientErrors` — the ``error_cb`` of a running role's clients: it logs what
  librdkafka reports and keeps a refusal for the role to raise, so a password rotated under a
  running role stops it too instead of looping.
* :func:`ensure_topics` — creates the missing topics with the settings' replication
  (:class:`TopicPolicy`; unset, 3, or as many as the cluster has brokers when it has fewer);
  a topic this principal may not create is reported, not retried.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import structlog
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from pin_sessions.platform.process import RoleCannotRun

log = structlog.get_logger(__name__)

PARTITIONS = 6  # SPEC §6: every topic
# SPEC §11: "1 on one broker, 3 in prod" — what an unset PIN_KAFKA__REPLICATION_FACTOR gives.
PRODUCTION_REPLICATION_FACTOR = 3
ADMIN_TIMEOUT_SECONDS = 10.0
EXIT_BAD_SETTING = 2

# Creating a topic refused for want of a right: the principal lacks CREATE on it.
_NOT_ALLOWED = {KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.CLUSTER_AUTHORIZATION_FAILED}


class KafkaAccessRefused(RoleCannotRun):
    """The broker refused the credentials, or TLS refused the broker: a setting is wrong."""

    exit_status = EXIT_BAD_SETTING


class TopicMissing(RoleCannotRun):
    """A topic the role needs does not exist, and its principal may not create it."""


@dataclass(frozen=True)
class TopicPolicy:
    """How the service makes a topic: 6 partitions, RF as set (None: chosen by
    :meth:`for_cluster`) and ``min.insync.replicas`` one less, at least 1."""

    replication_factor: int | None = None
    partitions: int = PARTITIONS

    def for_cluster(self, brokers: int) -> TopicPolicy:
        """The RF a cluster of ``brokers`` gets when none is set: 3, as production runs, or
        every broker of a smaller Kafka (a laptop's one broker). A set RF is kept, and a
        cluster too small for it refuses it by name (:func:`ensure_topics`)."""
        if self.replication_factor is not None:
            return self
        chosen = max(min(PRODUCTION_REPLICATION_FACTOR, brokers), 1)
        return TopicPolicy(chosen, self.partitions)

    @property
    def min_insync_replicas(self) -> int:
        """RF - 1, at least 1: one replica may be away while writes go on (SPEC §11)."""
        return max((self.replication_factor or 1) - 1, 1)

    def new_topic(self, name: str) -> NewTopic:
        return NewTopic(
            name,
            num_partitions=self.partitions,
            replication_factor=self.replication_factor or 1,
            config={"min.insync.replicas": str(self.min_insync_replicas)},
        )


def refusal_of(error: KafkaError, options: Mapping[str, str]) -> KafkaAccessRefused | None:
    """The one-line refusal ``error`` means, or None for a passing trouble (a broker away)."""
    reason = error.str()
    if error.code() == KafkaError._AUTHENTICATION:
        user = options.get("sasl.username", "")
        return KafkaAccessRefused(
            f"PIN_KAFKA__SASL_PASSWORD is refused by the broker for "
            f"PIN_KAFKA__SASL_USERNAME={user}: {reason}"
        )
    if error.code() == KafkaError._SSL:
        if "certificate verify failed" in reason:
            trusted = options.get("ssl.ca.location", "unset: the system's authorities")
            return KafkaAccessRefused(
                f"PIN_KAFKA__SSL_CA_LOCATION ({trusted}) does not trust the broker's "
                f"certificate: {reason}"
            )
        protocol = options.get("security.protocol", "plaintext")
        return KafkaAccessRefused(
            f"PIN_KAFKA__SECURITY_PROTOCOL={protocol}: the TLS handshake failed: {reason}"
        )
    return None


class ClientErrors:
    """``error_cb`` of one role's librdkafka clients (called on the thread that polls)."""

    def __init__(self, role: str, options: Mapping[str, str]) -> None:
        self._role = role
        self._options = dict(options)
        self._lock = threading.Lock()
        self._refused: KafkaAccessRefused | None = None
        self.seen = 0

    def __call__(self, error: KafkaError) -> None:
        refused = refusal_of(error, self._options)
        with self._lock:
            self.seen += 1
            if refused is not None:
                self._refused = refused
        log.warning("kafka client error", role=self._role, code=error.name(), error=error.str())

    def raise_if_refused(self) -> None:
        with self._lock:
            refused = self._refused
        if refused is not None:
            raise refused

    def take_seen(self) -> int:
        """How many errors since the last call: a role logs its recovery once they stop."""
        with self._lock:
            seen, self.seen = self.seen, 0
        return seen


def check_access(config: Mapping[str, Any], options: Mapping[str, str], *, timeout: float) -> bool:
    """Ask for metadata as ``config`` connects: True once answered, False if nothing answered
    within ``timeout`` (the role starts and retries); a refusal raises at once."""
    errors: list[KafkaError] = []
    admin = AdminClient({**config, "log_level": 0}, error_cb=errors.append)
    deadline = time.monotonic() + timeout
    while True:
        try:
            admin.list_topics(timeout=1.0)
            return True
        except KafkaException:
            pass
        admin.poll(0)  # serves error_cb
        for error in errors:
            refused = refusal_of(error, options)
            if refused is not None:
                raise refused
        if time.monotonic() > deadline:
            return False


def ensure_topics(admin: AdminClient, topics: Iterable[str], policy: TopicPolicy) -> set[str]:
    """Create the missing ones; returns those this principal may not create (still missing).

    A topic another process just made is fine. A topic that exists is left as it is: its
    replication is the operator's once made.
    """
    cluster = admin.list_topics(timeout=ADMIN_TIMEOUT_SECONDS)
    missing = [topic for topic in topics if topic not in set(cluster.topics)]
    if not missing:
        return set()
    policy = policy.for_cluster(len(cluster.brokers))
    futures = admin.create_topics(
        [policy.new_topic(topic) for topic in missing], operation_timeout=ADMIN_TIMEOUT_SECONDS
    )
    not_allowed: set[str] = set()
    for topic, future in futures.items():
        try:
            future.result()
            log.info(
                "topic created",
                topic=topic,
                partitions=policy.partitions,
                replicationFactor=policy.replication_factor,
                minInsyncReplicas=policy.min_insync_replicas,
            )
        except KafkaException as exc:
            code = exc.args[0].code()
            if code == KafkaError.TOPIC_ALREADY_EXISTS:
                continue
            if code in _NOT_ALLOWED:
                not_allowed.add(topic)
                continue
            if code == KafkaError.INVALID_REPLICATION_FACTOR:
                raise TopicMissing(
                    f"PIN_KAFKA__REPLICATION_FACTOR={policy.replication_factor} is refused "
                    f"for {topic}: {exc.args[0].str()}"
                ) from None
            raise
    return not_allowed


def missing_topic_refusal(topics: Iterable[str], options: Mapping[str, str]) -> TopicMissing:
    who = options.get("sasl.username")
    principal = f"PIN_KAFKA__SASL_USERNAME={who}" if who else "this client"
    names = ", ".join(sorted(topics))
    return TopicMissing(
        f"topic {names} does not exist and {principal} may not create it: "
        f"create it (6 partitions) or grant the principal Create on it"
    )

"""What a test Kafka node is configured with, and the ACLs of the users ``deploy/`` ships.

``node_properties`` writes a KRaft node's ``server.properties`` (broker and controller at
once, loopback listeners, the replication of a cluster of its size; with ``secure``, a
SASL_SSL listener with SCRAM-SHA-512, TLS from the node's PEM file, and the standard
authorizer). ``strimzi_acls`` reads Strimzi ``KafkaUser`` manifests into admin API bindings.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import yaml
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # exported without __all__
    AclBinding,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)

if TYPE_CHECKING:
    from tests.support.kafka import KafkaNode

SCRAM = "SCRAM-SHA-512"


def node_properties(
    node: KafkaNode, voters: dict[int, int], *, secure: bool, extra: dict[str, str]
) -> str:
    """``server.properties`` of ``node``; ``voters``: every node's id and controller port."""
    replicas = min(len(voters), 3)
    listeners = {"PLAINTEXT": node.port, "CONTROLLER": node.controller_port}
    if secure:
        listeners["SASL_SSL"] = node.secure_port
    properties = {
        "process.roles": "broker,controller",
        "node.id": str(node.node_id),
        "controller.quorum.voters": ",".join(
            f"{node_id}@127.0.0.1:{port}" for node_id, port in voters.items()
        ),
        "listeners": ",".join(f"{name}://127.0.0.1:{port}" for name, port in listeners.items()),
        "advertised.listeners": ",".join(
            f"{name}://127.0.0.1:{port}" for name, port in listeners.items() if name != "CONTROLLER"
        ),
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": ",".join(f"{name}:{name}" for name in listeners).replace(
            "CONTROLLER:CONTROLLER", "CONTROLLER:PLAINTEXT"
        ),
        "log.dirs": str(node.directory / "data"),
        # Topics are the relay's to create, with the settings' replication (SPEC §11).
        "auto.create.topics.enable": "false",
        "num.partitions": "6",
        "default.replication.factor": str(replicas),
        "offsets.topic.replication.factor": str(replicas),
        "offsets.topic.num.partitions": "6",
        "transaction.state.log.replication.factor": str(replicas),
        "transaction.state.log.min.isr": str(max(replicas - 1, 1)),
        "transaction.state.log.num.partitions": "6",
        "share.coordinator.state.topic.replication.factor": str(replicas),
        "share.coordinator.state.topic.min.isr": str(max(replicas - 1, 1)),
        "group.initial.rebalance.delay.ms": "0",
        # No no-op record every 500 ms in the metadata log: an idle node spent 2 % of a core
        # on them and what they wake (0.9 % without), for the whole run in every test process.
        "metadata.max.idle.interval.ms": "0",
        # A killed broker is fenced, and its partitions led elsewhere, within seconds.
        "broker.heartbeat.interval.ms": "1000",
        "broker.session.timeout.ms": "6000",
        # Few threads: a test broker serves a handful of clients on a shared machine.
        "num.network.threads": "2",
        "num.io.threads": "2",
        "background.threads": "2",
        "log.cleaner.threads": "1",
    }
    if secure:
        properties |= {
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:ANONYMOUS",
            "allow.everyone.if.no.acl.found": "false",
            "listener.name.sasl_ssl.sasl.enabled.mechanisms": SCRAM,
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": (
                "org.apache.kafka.common.security.scram.ScramLoginModule required;"
            ),
            "listener.name.sasl_ssl.ssl.keystore.type": "PEM",
            "listener.name.sasl_ssl.ssl.keystore.location": str(node.directory / "server.pem"),
        }
    properties |= extra
    return "".join(f"{key}={value}\n" for key, value in properties.items())


# Strimzi's names for what the admin API calls resource types and operations.
_STRIMZI_RESOURCES = {"topic": ResourceType.TOPIC, "group": ResourceType.GROUP}
_STRIMZI_PATTERNS = {"literal": ResourcePatternType.LITERAL, "prefix": ResourcePatternType.PREFIXED}


def strimzi_acls(manifest: Path) -> dict[str, list[AclBinding]]:
    """The ACLs of every ``KafkaUser`` in ``manifest``, by user name, as admin API bindings:
    what Strimzi's User Operator would create for them."""
    users: dict[str, list[AclBinding]] = {}
    for item in yaml.safe_load_all(manifest.read_text(encoding="utf-8")):
        if not item or item["kind"] != "KafkaUser":
            continue
        username = item["metadata"]["name"]
        users[username] = [
            AclBinding(
                _STRIMZI_RESOURCES[acl["resource"]["type"]],
                acl["resource"]["name"],
                _STRIMZI_PATTERNS[acl["resource"]["patternType"]],
                f"User:{username}",
                acl.get("host", "*"),
                AclOperation[_upper_snake(operation)],
                AclPermissionType.ALLOW,
            )
            for acl in item["spec"]["authorization"]["acls"]
            for operation in acl["operations"]
        ]
    return users


def _upper_snake(operation: str) -> str:
    return "".join(f"_{c}" if c.isupper() and i else c for i, c in enumerate(operation)).upper()

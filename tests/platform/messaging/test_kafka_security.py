"""``PIN_KAFKA__*``: TLS and SASL for real, per-role principals and seed 004's ACLs (SPEC §11).

The settings become librdkafka's properties, and a value librdkafka refuses stops the process
with one line. Against a broker of this module's own (Apache Kafka with a SASL_SSL listener,
TLS from a CA made here, SCRAM-SHA-512 users made through the admin API, the standard
authorizer), with the users and ACLs of ``deploy/kubernetes/kafka-users.yaml``: the relay and
a consumer deliver, each as its own user; a consumer's credentials neither write nor read
another topic; a wrong password and an untrusted certificate stop a role at start with one
line naming the setting; a topic the relay may not create stops it naming the topic.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AclBinding, AclOperation  # type: ignore[attr-defined]
from confluent_kafka.cimpl import NewTopic

from pin_sessions.bootstrap.delivery import PUBLISHED_TOPICS
from pin_sessions.cli.messaging import ACCESS_CHECK_SECONDS
from pin_sessions.dev_stats.consumers import SessionEndedConsumer
from pin_sessions.identity.events import SESSION_REVOKED_TOPIC, SIGN_INS_TOPIC
from pin_sessions.platform.messaging.kafka import (
    ClientOptionsRejected,
    KafkaConsumer,
    admin_config,
    check_client_options,
    consumer_config,
    producer_config,
)
from pin_sessions.platform.messaging.kafka_admin import KafkaAccessRefused
from pin_sessions.platform.messaging.metrics import MessagingMetrics
from pin_sessions.platform.messaging.runner import ConsumerRunner
from pin_sessions.platform.outbox import append
from pin_sessions.platform.runtime import Runtime
from pin_sessions.settings import SettingsError, load_settings
from pin_sessions.user_activity.events import SESSION_ENDED_TOPIC
from tests.conftest import TEST_SECRET_KEY
from tests.platform.messaging.pipeline import session_ended
from tests.support.kafka import KafkaCluster, Principal
from tests.support.kafka_config import strimzi_acls
from tests.support.processes import PROJECT_ROOT, pin_sessions
from tests.support.tls import Authority
from tests.support.waiting import wait_until, wait_until_sync

BROKERS = "kafka-1.internal:9093,kafka-2.internal:9093"


def test_sasl_over_tls_settings_become_the_librdkafka_properties_of_every_client(
    tmp_path: Path,
) -> None:
    settings = load_settings(
        {
            "PIN_KAFKA_BOOTSTRAP_SERVERS": BROKERS,
            "PIN_KAFKA__SECURITY_PROTOCOL": "sasl_ssl",
            "PIN_KAFKA__SASL_MECHANISM": "SCRAM-SHA-512",
            "PIN_KAFKA__SASL_USERNAME": "pin-sessions",
            "PIN_KAFKA__SASL_PASSWORD": "s3cret",
        }
    )
    options = settings.kafka.librdkafka_options()
    assert options == {
        "security.protocol": "sasl_ssl",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "pin-sessions",
        "sasl.password": "s3cret",
        "ssl.endpoint.identification.algorithm": "https",
    }
    assert "s3cret" not in repr(settings)  # a secret never reaches a log line
    for config in (
        producer_config(BROKERS, options, message_timeout_ms=1000),
        consumer_config(BROKERS, options, "dev-stats-session-ended", session_timeout_ms=6000),
        admin_config(BROKERS, options),
    ):
        assert {key: config[key] for key in options} == options
    # librdkafka accepts them as given (it refuses unknown or ill-typed properties).
    Producer(producer_config(BROKERS, options, message_timeout_ms=1000)).flush(0)
    Consumer(consumer_config(BROKERS, options, "group", session_timeout_ms=6000)).close()
    check_client_options(BROKERS, options)


@pytest.mark.parametrize(
    ("environ", "line"),
    [
        (
            {"PIN_KAFKA__SECURITY_PROTOCOL": "sasl_ssl"},
            "PIN_KAFKA__SASL_MECHANISM is required when PIN_KAFKA__SECURITY_PROTOCOL=sasl_ssl",
        ),
        (
            {"PIN_KAFKA__SECURITY_PROTOCOL": "tls"},
            "PIN_KAFKA__SECURITY_PROTOCOL input should be 'plaintext', 'ssl', 'sasl_plaintext' "
            "or 'sasl_ssl'",
        ),
        (
            {"PIN_KAFKA__SASL_USERNAME": "pin"},
            "PIN_KAFKA__SASL_USERNAME needs a sasl_* PIN_KAFKA__SECURITY_PROTOCOL",
        ),
        (
            {"PIN_KAFKA__SECURITY_PROTOCOL": "ssl", "PIN_KAFKA__SSL_CA_LOCATION": "/no/ca.pem"},
            "PIN_KAFKA__SSL_CA_LOCATION names no readable file: /no/ca.pem",
        ),
        ({"PIN_KAFKA__REPLICATION_FACTOR": "0"}, "PIN_KAFKA__REPLICATION_FACTOR must be >= 1"),
    ],
)
def test_a_bad_kafka_setting_is_one_line_naming_it(environ: dict[str, str], line: str) -> None:
    with pytest.raises(SettingsError) as caught:
        load_settings(environ)
    assert str(caught.value) == line


def test_a_certificate_librdkafka_refuses_stops_the_process_with_one_line(
    tmp_path: Path, database_url: str
) -> None:
    not_pem = tmp_path / "ca.pem"
    not_pem.write_text("not a certificate\n")
    with pytest.raises(ClientOptionsRejected, match=r"^PIN_KAFKA__SSL_CA_LOCATION "):
        check_client_options(BROKERS, {"security.protocol": "ssl", "ssl.ca.location": str(not_pem)})
    process = pin_sessions(
        "relay",
        env={
            "PIN_DATABASE_URL": database_url,
            "PIN_DATA_DIR": str(tmp_path / "data"),
            "PIN_SECRET_KEY": TEST_SECRET_KEY,
            "PIN_KAFKA_BOOTSTRAP_SERVERS": BROKERS,
            "PIN_KAFKA__SECURITY_PROTOCOL": "ssl",
            "PIN_KAFKA__SSL_CA_LOCATION": str(not_pem),
        },
    )
    _, err = process.communicate(timeout=60)
    assert process.returncode == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("PIN_KAFKA__SSL_CA_LOCATION is refused by librdkafka: ")


# -- against Apache Kafka ----------------------------------------------------------------------

KAFKA_USERS = PROJECT_ROOT / "deploy" / "kubernetes" / "kafka-users.yaml"
RELAY = "pin-sessions-relay"
DEV_STATS = "dev-stats-session-ended"
DEV_STATS_USER = f"pin-sessions-consume-{DEV_STATS}"
EVENTS = 12


@pytest.fixture(scope="module")
def secure_kafka() -> Iterator[KafkaCluster]:
    """This module's own broker: its tests use the real topic and group names."""
    cluster = KafkaCluster(secure=True)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def principals(secure_kafka: KafkaCluster) -> dict[str, Principal]:
    """Every user of the shipped manifest, with its ACLs, as Strimzi would make them."""
    made = {}
    for username, bindings in strimzi_acls(KAFKA_USERS).items():
        made[username] = secure_kafka.create_user(username)
        secure_kafka.grant(bindings)
    return made


def _role(*args: str, env: dict[str, str], log: Path) -> tuple[subprocess.Popen[str], IO[str]]:
    output = log.open("w")
    return pin_sessions(*args, env=env, output=output), output


async def test_the_relay_and_a_consumer_deliver_over_sasl_ssl_each_as_its_own_user(
    secure_kafka: KafkaCluster,
    principals: dict[str, Principal],
    runtime: Runtime,
    settings_env: dict[str, str],
    tmp_path: Path,
) -> None:
    async with runtime.database.transaction() as conn:
        for _ in range(EVENTS):
            await append(conn, session_ended(SESSION_ENDED_TOPIC), now=runtime.clock.now())
    relay_env = settings_env | secure_kafka.secure_env(principals[RELAY])
    consumer_env = settings_env | secure_kafka.secure_env(principals[DEV_STATS_USER])
    roles = [
        _role("relay", env=relay_env, log=tmp_path / "relay.log"),
        _role("consume", DEV_STATS, env=consumer_env, log=tmp_path / "consumer.log"),
    ]
    try:

        async def delivered() -> bool:
            for (process, _), log in zip(roles, ("relay.log", "consumer.log"), strict=True):
                assert process.poll() is None, (tmp_path / log).read_text()[-3000:]
            async with runtime.database.connection() as conn:
                facts: int = await conn.fetchval("select count(*) from dev_stats.session_facts")
            return facts == EVENTS

        await wait_until(delivered, timeout=120, interval=0.5)
    finally:
        for process, output in roles:
            process.send_signal(signal.SIGTERM)
            await asyncio.to_thread(process.wait, 30)
            output.close()
    assert [process.returncode for process, _ in roles] == [0, 0]
    # The relay made every topic of the contexts, as SPEC §6 and §11 say.
    topics = secure_kafka.admin().list_topics(timeout=10).topics
    for topic in PUBLISHED_TOPICS:
        assert len(topics[topic].partitions) == 6, topic
        assert len(topics[topic].partitions[0].replicas) == 1, topic


def _secure_client(cluster: KafkaCluster, principal: Principal, **extra: Any) -> dict[str, Any]:
    return {
        "bootstrap.servers": cluster.secure_bootstrap,
        "security.protocol": "sasl_ssl",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": principal.username,
        "sasl.password": principal.password,
        "ssl.ca.location": str(cluster.ca_location),
        "log_level": 0,
        **extra,
    }


def _write(cluster: KafkaCluster, principal: Principal, topic: str) -> KafkaError | None:
    """One record as ``principal``: None when acknowledged, else the broker's error."""
    reports: list[KafkaError | None] = []
    producer = Producer(
        _secure_client(cluster, principal, **{"acks": "all", "message.timeout.ms": 15000})
    )
    producer.produce(topic, b"{}", on_delivery=lambda error, _: reports.append(error))
    producer.flush(30)
    assert len(reports) == 1
    return reports[0]


def _read_refusal(cluster: KafkaCluster, principal: Principal, topic: str, group: str) -> int:
    """Subscribe as ``principal`` in ``group``: the error code the broker answers with."""
    consumer = Consumer(
        _secure_client(cluster, principal, **{"group.id": group, "auto.offset.reset": "earliest"})
    )
    consumer.subscribe([topic])
    refusal: list[int] = []

    def refused() -> bool:
        for record in consumer.consume(10, 0.5):
            error = record.error()
            if error is not None and error.code() != KafkaError._PARTITION_EOF:
                refusal.append(error.code())
        return bool(refusal)

    try:
        wait_until_sync(refused, timeout=60, interval=0)
    finally:
        consumer.close()
    return refusal[0]


def test_a_consumers_credentials_neither_write_nor_read_another_topic(
    secure_kafka: KafkaCluster, principals: dict[str, Principal]
) -> None:
    """Seed 004's m2m ACL: dev-stats may read its topic under its own group, nothing more."""
    other = "pin.someone-else.things.v1"
    admin = secure_kafka.admin()
    missing = [
        topic
        for topic in (SESSION_ENDED_TOPIC, SIGN_INS_TOPIC, other)
        if topic not in admin.list_topics(timeout=10).topics
    ]
    for future in admin.create_topics([NewTopic(t, 6, 1) for t in missing]).values():
        future.result(timeout=30)
    consumer, relay = principals[DEV_STATS_USER], principals[RELAY]

    assert _write(secure_kafka, relay, SESSION_ENDED_TOPIC) is None  # the relay writes its own
    for principal, topic in ((consumer, SESSION_ENDED_TOPIC), (consumer, other), (relay, other)):
        error = _write(secure_kafka, principal, topic)
        assert error is not None, (principal.username, topic)
        assert error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, (principal.username, topic)
    assert (
        _read_refusal(secure_kafka, consumer, SIGN_INS_TOPIC, group=DEV_STATS)
        == KafkaError.TOPIC_AUTHORIZATION_FAILED
    )
    assert (
        _read_refusal(secure_kafka, consumer, SESSION_ENDED_TOPIC, group="identity-signed-in")
        == KafkaError.GROUP_AUTHORIZATION_FAILED
    )


def _refused_at_start(*args: str, env: dict[str, str]) -> tuple[int, list[str], float]:
    began = time.monotonic()
    process = pin_sessions(*args, env=env)
    try:
        _, err = process.communicate(timeout=90)
    finally:
        process.kill()  # a role that did not stop is a failure, and must not outlive it
        process.wait()
    return process.returncode, err.strip().splitlines(), time.monotonic() - began


ROLES = [("relay",), ("consume", DEV_STATS)]


@pytest.mark.parametrize("role", ROLES, ids=lambda role: role[0])
def test_a_wrong_password_stops_the_role_at_start_with_one_line(
    role: tuple[str, ...],
    secure_kafka: KafkaCluster,
    principals: dict[str, Principal],
    settings_env: dict[str, str],
) -> None:
    user = RELAY if role == ("relay",) else DEV_STATS_USER
    wrong = Principal(user, principals[user].password + "x")
    env = settings_env | secure_kafka.secure_env(wrong)
    status, lines, seconds = _refused_at_start(*role, env=env)
    assert status == 2 and len(lines) == 1, lines
    assert lines[0].startswith(
        f"PIN_KAFKA__SASL_PASSWORD is refused by the broker for PIN_KAFKA__SASL_USERNAME={user}: "
    )
    assert wrong.password not in lines[0]
    # Told, not retried: well within the start's wait for a broker that does not answer.
    assert seconds < ACCESS_CHECK_SECONDS + 30


@pytest.mark.parametrize("role", ROLES, ids=lambda role: role[0])
def test_an_untrusted_broker_certificate_stops_the_role_at_start_with_one_line(
    role: tuple[str, ...],
    secure_kafka: KafkaCluster,
    principals: dict[str, Principal],
    settings_env: dict[str, str],
    tmp_path: Path,
) -> None:
    user = RELAY if role == ("relay",) else DEV_STATS_USER
    stranger = Authority.create("someone else's CA").write_ca(tmp_path / "other-ca.pem")
    env = settings_env | secure_kafka.secure_env(principals[user])
    env["PIN_KAFKA__SSL_CA_LOCATION"] = str(stranger)
    status, lines, seconds = _refused_at_start(*role, env=env)
    assert status == 2 and len(lines) == 1, lines
    assert lines[0].startswith(
        f"PIN_KAFKA__SSL_CA_LOCATION ({stranger}) does not trust the broker's certificate: "
    )
    assert seconds < ACCESS_CHECK_SECONDS + 30


def _delete_if_present(cluster: KafkaCluster, topic: str) -> None:
    admin = cluster.admin()
    if topic in admin.list_topics(timeout=10).topics:
        for future in admin.delete_topics([topic]).values():
            future.result(timeout=30)


def test_a_relay_that_may_not_create_a_missing_topic_stops_naming_it(
    secure_kafka: KafkaCluster, settings_env: dict[str, str]
) -> None:
    """Topics managed elsewhere: the operator withheld Create, and one is missing."""
    user = secure_kafka.create_user("relay-without-create")
    secure_kafka.grant(
        [
            AclBinding(
                binding.restype,
                binding.name,
                binding.resource_pattern_type,
                user.name,
                binding.host,
                binding.operation,
                binding.permission_type,
            )
            for binding in strimzi_acls(KAFKA_USERS)[RELAY]
            if binding.operation != AclOperation.CREATE
        ]
    )
    _delete_if_present(secure_kafka, SESSION_REVOKED_TOPIC)
    env = settings_env | secure_kafka.secure_env(user)
    status, lines, _ = _refused_at_start("relay", env=env)
    assert status == 1 and len(lines) == 1, lines
    assert lines[0].startswith("topic") and SESSION_REVOKED_TOPIC in lines[0], lines
    assert "PIN_KAFKA__SASL_USERNAME=relay-without-create may not create" in lines[0]


def test_a_replication_factor_the_brokers_cannot_meet_stops_the_relay_naming_it(
    secure_kafka: KafkaCluster, settings_env: dict[str, str]
) -> None:
    """Three replicas asked of one broker: a set RF is kept, never lowered to what fits."""
    _delete_if_present(secure_kafka, SESSION_REVOKED_TOPIC)
    env = settings_env | secure_kafka.env() | {"PIN_KAFKA__REPLICATION_FACTOR": "3"}
    status, lines, _ = _refused_at_start("relay", env=env)
    assert status == 1 and len(lines) == 1, lines
    assert lines[0].startswith("PIN_KAFKA__REPLICATION_FACTOR=3 is refused for "), lines


async def test_a_refusal_met_after_the_start_stops_the_consumer_instead_of_a_retry_loop(
    secure_kafka: KafkaCluster, principals: dict[str, Principal], runtime: Runtime
) -> None:
    """The password rotated under a running role (or the broker came after the start's
    check): librdkafka would retry for ever; the role stops with the same one line."""
    wrong = Principal(DEV_STATS_USER, principals[DEV_STATS_USER].password + "x")
    settings = load_settings({"PIN_SECRET_KEY": TEST_SECRET_KEY} | secure_kafka.secure_env(wrong))
    metrics = MessagingMetrics.register(runtime.registry)
    runner = ConsumerRunner(SessionEndedConsumer(), runtime.database, runtime.clock, metrics)
    consumer = KafkaConsumer(
        runner,
        secure_kafka.secure_bootstrap,
        metrics,
        options=settings.kafka.librdkafka_options(),
    )
    with pytest.raises(KafkaAccessRefused, match=r"^PIN_KAFKA__SASL_PASSWORD is refused"):
        await asyncio.wait_for(consumer.run(asyncio.Event()), timeout=90)

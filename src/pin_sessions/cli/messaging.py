"""``pin-sessions relay`` and ``pin-sessions consume NAME``.

Each runs until SIGINT/SIGTERM, serving Prometheus metrics on ``--metrics-port`` or
``PIN_METRICS_PORT``. ``consume`` reads Kafka when ``PIN_KAFKA_BOOTSTRAP_SERVERS`` is set,
else the built-in PostgreSQL bus; ``relay`` needs Kafka.
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import TYPE_CHECKING

import structlog
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from pin_sessions.bootstrap.database import build_runtime, database_endpoint, worker_database
from pin_sessions.bootstrap.delivery import (
    CONSUMERS,
    PUBLISHED_TOPICS,
    build_consumer,
    build_relay,
    topic_policy,
)
from pin_sessions.cli.common import (
    EXIT_USAGE,
    add_command,
    add_metrics_port,
    add_name,
    metrics_endpoint,
    metrics_port,
    role_banner,
)
from pin_sessions.platform.messaging.kafka import admin_config
from pin_sessions.platform.messaging.kafka_admin import (
    check_access,
    ensure_topics,
    missing_topic_refusal,
)
from pin_sessions.platform.messaging.metrics import MessagingMetrics
from pin_sessions.platform.process import Role, install_stop_signals, run_process, run_roles
from pin_sessions.platform.tracing import process_tracing

if TYPE_CHECKING:
    import argparse

    from pin_sessions.cli.common import Commands
    from pin_sessions.platform.runtime import Runtime
    from pin_sessions.settings import Settings

log = structlog.get_logger("pin_sessions.cli")

STOP_GRACE_SECONDS = 10.0
# How long the start waits for a first answer from Kafka before the role starts anyway and
# retries (a refusal comes within a second or so; a broker still starting may take longer).
ACCESS_CHECK_SECONDS = 15.0
# The commands whose roles connect to Kafka, and those among them that run the relay.
CONNECTING_COMMANDS = frozenset({"relay", "consume", "up"})
RELAYING_COMMANDS = frozenset({"relay", "up"})


def add_parsers(commands: Commands) -> None:
    relay = add_command(commands, "relay", "publish the outbox to Kafka")
    add_metrics_port(relay)
    relay.set_defaults(run=run)
    consume = add_command(commands, "consume", "run one integration-event consumer")
    add_name(consume, CONSUMERS, "consumer")
    add_metrics_port(consume)
    consume.set_defaults(run=run)


def run(settings: Settings, args: argparse.Namespace) -> int:
    if args.command == "relay" and not settings.kafka_bootstrap_servers:
        print("pin-sessions: relay needs PIN_KAFKA_BOOTSTRAP_SERVERS", file=sys.stderr)
        return EXIT_USAGE
    role_name = "relay" if args.command == "relay" else f"consume.{args.name}"
    port = metrics_port(settings, args)
    with process_tracing(role_name, os.environ), database_endpoint(settings) as dsn:
        runtime = build_runtime(settings, dsn, database=worker_database(settings, dsn))
        role = delivery_role(runtime, args)
        with metrics_endpoint(port, runtime.registry) as bound:
            role_banner(args, f"pin-sessions {role.name.replace('.', ' ')}", bound)
            run_process(run_role(runtime, role))
        log.info("stopped", role=role.name)
    return 0


def check_kafka_at_start(settings: Settings, command: str) -> None:
    """Before a role that uses Kafka starts: connect once as it will, and (relay) make the
    contexts' missing topics. A refused password, an untrusted certificate, a topic the
    relay may not create raise ``RoleCannotRun`` with one line; a broker that does not
    answer yet is only warned about, since the roles retry."""
    servers = settings.kafka_bootstrap_servers
    if not servers or command not in CONNECTING_COMMANDS:
        return
    options = settings.kafka.librdkafka_options()
    config = admin_config(servers, options)
    if not check_access(config, options, timeout=ACCESS_CHECK_SECONDS):
        log.warning("Kafka did not answer at start; starting anyway", bootstrapServers=servers)
        return
    if command not in RELAYING_COMMANDS:
        return
    admin = AdminClient({**config, "log_level": 0})
    try:
        not_allowed = ensure_topics(admin, PUBLISHED_TOPICS, topic_policy(settings.kafka))
    except KafkaException as exc:
        log.warning("topics not checked at start; the relay makes them", error=str(exc))
        return
    if not_allowed:
        raise missing_topic_refusal(not_allowed, options)


def delivery_role(runtime: Runtime, args: argparse.Namespace) -> Role:
    """The relay, or the consumer ``args`` names, with its metrics on the runtime's registry."""
    metrics = MessagingMetrics.register(runtime.registry)
    if args.command == "relay":
        return build_relay(runtime, metrics)
    return build_consumer(runtime, args.name, metrics)


async def run_role(runtime: Runtime, role: Role) -> None:
    """Open the database and run ``role`` until SIGINT/SIGTERM."""
    stop = asyncio.Event()
    install_stop_signals(stop)
    await runtime.database.open()
    try:
        await run_roles([role], stop, grace_seconds=STOP_GRACE_SECONDS)
    finally:
        await runtime.database.close()

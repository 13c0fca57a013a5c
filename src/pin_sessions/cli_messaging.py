"""``pin-sessions relay`` and ``pin-sessions consume NAME`` (SPEC §2, §6, §7).

Each runs until SIGINT/SIGTERM, serving Prometheus metrics on ``--metrics-port`` or
``PIN_METRICS_PORT``. ``consume`` reads Kafka when ``PIN_KAFKA_BOOTSTRAP_SERVERS`` is set,
else the built-in PostgreSQL bus; ``relay`` needs Kafka.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import TYPE_CHECKING, Any

import structlog
from prometheus_client import start_http_server

from pin_sessions.bootstrap import (
    CONSUMERS,
    build_consumer,
    build_relay,
    build_runtime,
    database_endpoint,
    worker_database,
)
from pin_sessions.platform.messaging.metrics import MessagingMetrics
from pin_sessions.platform.process import Role, install_stop_signals, run_roles
from pin_sessions.platform.tracing import process_tracing

if TYPE_CHECKING:
    from pin_sessions.platform.runtime import Runtime
    from pin_sessions.settings import Settings

log = structlog.get_logger("pin_sessions.cli")

EXIT_USAGE = 2
STOP_GRACE_SECONDS = 10.0
# Scraped by Prometheus from another machine; the metrics carry no personal data.
METRICS_ADDRESS = "0.0.0.0"  # noqa: S104
# Test-only: seconds a relay or bus consumer waits between its effects and recording its
# progress, so a test can kill it inside that window. Never set in production.
TEST_PAUSE_VARIABLE = "PIN_TEST_PAUSE_BEFORE_PROGRESS"


def add_messaging_parsers(commands: Any) -> None:
    """Register ``relay`` and ``consume`` on the CLI's subparsers."""
    relay = commands.add_parser("relay", help="publish the outbox to Kafka")
    relay.add_argument("--metrics-port", type=int, default=None, help="Prometheus port")
    consume = commands.add_parser("consume", help="run one integration-event consumer")
    consume.add_argument("name", choices=sorted(CONSUMERS))
    consume.add_argument("--metrics-port", type=int, default=None, help="Prometheus port")


def run_messaging_command(settings: Settings, args: argparse.Namespace) -> int:
    if args.command == "relay" and not settings.kafka_bootstrap_servers:
        print("pin-sessions: relay needs PIN_KAFKA_BOOTSTRAP_SERVERS", file=sys.stderr)
        return EXIT_USAGE
    role_name = "relay" if args.command == "relay" else f"consume.{args.name}"
    port = args.metrics_port if args.metrics_port is not None else settings.metrics_port
    pause = float(os.environ.get(TEST_PAUSE_VARIABLE, "0"))
    with process_tracing(role_name, os.environ), database_endpoint(settings) as dsn:
        runtime = build_runtime(settings, dsn, database=worker_database(dsn, max_size=4))
        metrics = MessagingMetrics.register(runtime.registry)
        role: Role = (
            build_relay(runtime, metrics, pause_before_progress_seconds=pause)
            if args.command == "relay"
            else build_consumer(runtime, args.name, metrics, pause_before_progress_seconds=pause)
        )
        asyncio.run(_run(runtime, role, port))
    return 0


async def _run(runtime: Runtime, role: Role, port: int | None) -> None:
    stop = asyncio.Event()
    install_stop_signals(stop)
    server = None
    if port is not None:
        server, _thread = start_http_server(port, addr=METRICS_ADDRESS, registry=runtime.registry)
        log.info("metrics listening", port=server.server_port)
    await runtime.database.open()
    try:
        await run_roles([role], stop, grace_seconds=STOP_GRACE_SECONDS)
    finally:
        await runtime.database.close()
        if server is not None:
            server.shutdown()
    log.info("stopped", role=role.name)

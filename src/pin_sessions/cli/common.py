"""What the commands share: exit statuses, their signature, a long-running role's metrics."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, TypeAlias, TypeVar

import structlog
from prometheus_client import CollectorRegistry, start_http_server

from pin_sessions.bootstrap import build_runtime, database_endpoint, worker_database

if TYPE_CHECKING:
    from pin_sessions.platform.runtime import Runtime
    from pin_sessions.settings import Settings

    Commands: TypeAlias = argparse._SubParsersAction[argparse.ArgumentParser]

log = structlog.get_logger("pin_sessions.cli")

EXIT_FAILURE = 1
EXIT_USAGE = 2
# Scraped by Prometheus from another machine; the metrics carry no personal data.
METRICS_ADDRESS = "0.0.0.0"  # noqa: S104

# What a parser's ``run`` default is: settings and the parsed arguments in, exit status out.
Command: TypeAlias = Callable[["Settings", argparse.Namespace], int]


def add_metrics_port(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--metrics-port", type=int, default=None, help="Prometheus port")


def metrics_port(settings: Settings, args: argparse.Namespace) -> int | None:
    """``--metrics-port`` when given, else ``PIN_METRICS_PORT`` (None: no endpoint)."""
    port: int | None = args.metrics_port
    return port if port is not None else settings.metrics_port


@contextlib.contextmanager
def metrics_endpoint(port: int | None, registry: CollectorRegistry) -> Iterator[None]:
    """Serve ``registry`` for Prometheus on ``port`` while the block runs."""
    if port is None:
        yield
        return
    server, _thread = start_http_server(port, addr=METRICS_ADDRESS, registry=registry)
    log.info("metrics listening", port=server.server_port)
    try:
        yield
    finally:
        server.shutdown()


T = TypeVar("T")


def run_one_shot(settings: Settings, work: Callable[[Runtime], Awaitable[T]]) -> T:
    """``work`` on a runtime with a one-connection pool: an operator's command, not a role."""

    async def run(dsn: str) -> T:
        runtime = build_runtime(settings, dsn, database=worker_database(dsn, max_size=1))
        await runtime.database.open()
        try:
            return await work(runtime)
        finally:
            await runtime.database.close()

    with database_endpoint(settings) as dsn:
        return asyncio.run(run(dsn))

"""What the commands share: exit statuses, their signature, a long-running role's metrics."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, TypeAlias, TypeVar

import structlog
from prometheus_client import CollectorRegistry, start_http_server

from pin_sessions.bootstrap.database import build_runtime, database_endpoint, worker_database
from pin_sessions.platform.logging import configure_logging
from pin_sessions.settings import LogFormat

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


def configure_process_logging(settings: Settings) -> bool:
    """Console lines for a person at a terminal, JSON lines for anything else; True for console.

    ``PIN_LOG_FORMAT=json`` (or ``console``) decides instead of the terminal.
    """
    console = settings.log_format is LogFormat.CONSOLE or (
        settings.log_format is LogFormat.AUTO and sys.stderr.isatty()
    )
    configure_logging(settings.log_level, console=console)
    return console


def print_banner(title: str, urls: Mapping[str, str]) -> None:
    """What a newcomer reads first: what started and where to point a browser."""
    width = max(len(name) for name in urls) if urls else 0
    lines = ["", f"  {title}", *(f"    {name:<{width}}  {url}" for name, url in urls.items())]
    lines += ["  Ctrl-C stops it.", ""]
    print("\n".join(lines), file=sys.stderr, flush=True)


def metrics_url(port: int) -> str:
    """Where a role's own metrics endpoint answers, as a person on this machine reaches it."""
    return f"http://127.0.0.1:{port}/metrics"


def add_command(commands: Commands, name: str, text: str) -> argparse.ArgumentParser:
    """A command whose one line of help shows in its parent's list and atop its own --help."""
    return commands.add_parser(name, help=text, description=text)


def add_name(parser: argparse.ArgumentParser, names: Iterable[str], what: str) -> None:
    """The ``NAME`` a command runs (a job, a consumer), one of ``names``, listed in its help."""
    choices = sorted(names)
    parser.add_argument(
        "name", choices=choices, metavar="NAME", help=f"the {what}: {', '.join(choices)}"
    )


def add_actions(parser: argparse.ArgumentParser, dest: str) -> Commands:
    """The actions under a command (``clients create``); ``dest`` holds the one chosen.

    A missing or unknown one is reported as ``ACTION``, never by ``dest``.
    """
    return parser.add_subparsers(dest=dest, metavar="ACTION", title="actions", required=True)


def add_metrics_port(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        metavar="PORT",
        help="serve Prometheus metrics on this port (default: PIN_METRICS_PORT; unset: none)",
    )


def metrics_port(settings: Settings, args: argparse.Namespace) -> int | None:
    """``--metrics-port`` when given, else ``PIN_METRICS_PORT`` (None: no endpoint)."""
    port: int | None = args.metrics_port
    return port if port is not None else settings.metrics_port


@contextlib.contextmanager
def metrics_endpoint(port: int | None, registry: CollectorRegistry) -> Iterator[int | None]:
    """Serve ``registry`` for Prometheus on ``port`` while the block runs; yields the bound port."""
    if port is None:
        yield None
        return
    server, _thread = start_http_server(port, addr=METRICS_ADDRESS, registry=registry)
    log.info("metrics listening", port=server.server_port, url=metrics_url(server.server_port))
    try:
        yield server.server_port
    finally:
        server.shutdown()


def role_banner(args: argparse.Namespace, title: str, metrics_port: int | None) -> None:
    """A worker role's banner, on a terminal: what runs, and its metrics if it serves them."""
    if args.console:
        print_banner(title, {} if metrics_port is None else {"Metrics": metrics_url(metrics_port)})


T = TypeVar("T")


def run_one_shot(settings: Settings, work: Callable[[Runtime], Awaitable[T]]) -> T:
    """``work`` on a runtime with a one-connection pool: an operator's command, not a role."""

    async def run(dsn: str) -> T:
        runtime = build_runtime(settings, dsn, database=worker_database(settings, dsn, max_size=1))
        await runtime.database.open()
        try:
            return await work(runtime)
        finally:
            await runtime.database.close()

    with database_endpoint(settings) as dsn:
        return asyncio.run(run(dsn))

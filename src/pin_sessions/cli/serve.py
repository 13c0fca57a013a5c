"""``pin-sessions serve [--host] [--port] [--workers N]``: the HTTP API only.

With ``--workers N`` this process binds the port once and supervises N worker
processes that each serve it as a single ``serve`` would (``platform/supervisor.py``),
with one ``/metrics`` for them all: prometheus-client's multiprocess mode, its files in
a directory made for this run and removed after it.

Metrics are served on ``--metrics-port`` or ``PIN_METRICS_PORT`` when one is given, as by
every role — under ``--workers N`` by this supervising process, merged — and outside prod
also on the API port. In prod the API port never shows them (SPEC §11): without a metrics
port the API serves no metrics at all, and says so at start.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import sys
import tempfile
from typing import TYPE_CHECKING

import structlog

from pin_sessions.bootstrap import build_api, build_runtime, database_endpoint
from pin_sessions.cli.common import (
    EXIT_FAILURE,
    add_metrics_port,
    configure_process_logging,
    metrics_endpoint,
    metrics_port,
    print_banner,
)
from pin_sessions.platform.metrics import merged_registry
from pin_sessions.platform.process import install_stop_signals, run_process, run_roles
from pin_sessions.platform.serving import ApiRole, ApiServer
from pin_sessions.platform.supervisor import Supervisor, WorkerFailedToStart
from pin_sessions.platform.tracing import process_tracing
from pin_sessions.settings import load_settings

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable
    from multiprocessing.synchronize import Event as ProcessEvent

    from prometheus_client import CollectorRegistry

    from pin_sessions.cli.common import Commands
    from pin_sessions.platform.runtime import Runtime
    from pin_sessions.settings import Settings

log = structlog.get_logger("pin_sessions.cli")

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
# prometheus-client reads it when imported: set here, for the workers, before they start.
MULTIPROC_DIR_VARIABLE = "PROMETHEUS_MULTIPROC_DIR"


def add_parsers(commands: Commands) -> None:
    serve = commands.add_parser("serve", help="the HTTP API only")
    serve.add_argument("--host", default=DEFAULT_HOST)
    serve.add_argument("--port", type=int, default=DEFAULT_PORT)
    serve.add_argument("--workers", type=int, default=1)
    add_metrics_port(serve)
    serve.set_defaults(run=run)


def stop_grace_seconds(settings: Settings) -> float:
    """How long a stop may take: the shutdown delay, the drain, and a second to close."""
    http = settings.http
    return (http.shutdown_delay + http.shutdown_timeout).total_seconds() + 1.0


def run(settings: Settings, args: argparse.Namespace) -> int:
    settings.check_api_can_sign_in()
    port = api_metrics_port(settings, args)
    with database_endpoint(settings) as dsn:
        if args.workers > 1:
            return _serve_workers(
                settings, dsn, args.host, args.port, args.workers, port, console=args.console
            )
        with process_tracing("api", os.environ):
            runtime = build_runtime(settings, dsn)
            role = api_role(
                runtime,
                args.host,
                args.port,
                on_listening=(
                    (
                        lambda bound: print_banner(
                            "PIN Sessions API", api_urls(args.host, bound, settings)
                        )
                    )
                    if args.console
                    else None
                ),
            )
            with metrics_endpoint(port, runtime.registry):
                run_process(serve_api(role, settings))
    return 0


def api_metrics_port(settings: Settings, args: argparse.Namespace) -> int | None:
    """The API's metrics port; in prod, where the API port shows none, a missing one is said."""
    port = metrics_port(settings, args)
    if port is None and not settings.serves_metrics_on_api_port:
        log.warning(
            "no metrics are served: PIN_METRICS_PORT is unset, and in prod the API port "
            "has no /metrics"
        )
    return port


def api_urls(host: str, port: int, settings: Settings) -> dict[str, str]:
    """Every page a newcomer may open, in the order they will want them."""
    base = f"http://{host}:{port}"
    urls = {"API": base}
    if settings.serves_docs:
        urls["Docs"] = f"{base}/docs"
    urls |= {"Demo": f"{base}/demo", "Dashboard": f"{base}/dev-stats"}
    if settings.serves_metrics_on_api_port:
        urls["Metrics"] = f"{base}/metrics"
    return urls


async def serve_api(role: ApiRole, settings: Settings) -> None:
    stop = asyncio.Event()
    install_stop_signals(stop)
    await run_roles([role], stop, grace_seconds=stop_grace_seconds(settings))


def _serve_workers(
    settings: Settings,
    dsn: str,
    host: str,
    port: int,
    workers: int,
    metrics_port: int | None,
    *,
    console: bool,
) -> int:
    metrics_dir = tempfile.mkdtemp(prefix="pin-sessions-metrics-")
    os.environ[MULTIPROC_DIR_VARIABLE] = metrics_dir
    sock = socket.create_server((host, port), backlog=2048)
    sock.set_inheritable(True)
    log.info("serving with workers", workers=workers, url=f"http://{host}:{port}")
    if console:
        print_banner(f"PIN Sessions API ({workers} workers)", api_urls(host, port, settings))
    try:
        # Every worker's samples, merged from their files at each scrape.
        with metrics_endpoint(metrics_port, merged_registry(metrics_dir)):
            Supervisor(
                _ApiWorker(dsn, host),
                sock,
                workers,
                stop_grace_seconds=stop_grace_seconds(settings),
            ).run()
    except WorkerFailedToStart as exc:
        print(f"pin-sessions: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    finally:
        sock.close()
        shutil.rmtree(metrics_dir, ignore_errors=True)
    log.info("stopped")
    return 0


class _ApiWorker:
    """One worker process of ``serve --workers N`` (picklable, so ``spawn`` can start it)."""

    def __init__(self, dsn: str, host: str) -> None:
        self.dsn = dsn
        self.host = host

    def __call__(self, sock: socket.socket, listening: ProcessEvent) -> None:
        # A fresh interpreter: it wires itself from the environment it inherited, like
        # any command, and reports its metrics through the shared directory.
        settings = load_settings(os.environ)
        configure_process_logging(settings)
        with process_tracing("api", os.environ):
            runtime = build_runtime(settings, self.dsn)
            role = api_role(
                runtime,
                self.host,
                sock.getsockname()[1],
                sock=sock,
                metrics_view=merged_registry(os.environ[MULTIPROC_DIR_VARIABLE]),
                on_listening=lambda _port: listening.set(),
            )
            run_process(serve_api(role, settings))


def api_role(
    runtime: Runtime,
    host: str,
    port: int,
    *,
    sock: socket.socket | None = None,
    metrics_view: CollectorRegistry | None = None,
    on_listening: Callable[[int], None] | None = None,
) -> ApiRole:
    """The API as a role that logs where it listens once it does."""

    def listening(bound_port: int) -> None:
        urls = api_urls(host, bound_port, runtime.settings)
        log.info(
            "listening", url=urls.pop("API"), **{name.lower(): url for name, url in urls.items()}
        )
        if on_listening is not None:
            on_listening(bound_port)

    http = runtime.settings.http
    server = ApiServer(
        build_api(runtime, metrics_view=metrics_view),
        host=host,
        port=port,
        sock=sock,
        shutdown_timeout=http.shutdown_timeout,
    )
    return ApiRole(server, on_listening=listening, shutdown_delay=http.shutdown_delay)

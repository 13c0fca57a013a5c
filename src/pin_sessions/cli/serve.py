"""``pin-sessions serve [--host] [--port] [--workers N]``: the HTTP API only.

It listens on ``--host``/``--port`` when given, else on ``PIN_HTTP__HOST``/``PIN_HTTP__PORT``
(127.0.0.1:8000): the flag wins for this process. The socket is bound before the API is
built, so an unset ``PIN_PUBLIC_URL`` follows the address really bound, port 0 included
(SPEC §11): the tokens' ``iss``, the OAuth metadata's URLs and the banner all name it.

With ``--workers N`` this process binds the port once and supervises N worker
processes that each serve it as a single ``serve`` would, under uvicorn's own supervisor
(``platform/api_workers.py``),
with one ``/metrics`` for them all: prometheus-client's multiprocess mode, its files in
a directory made for this run and removed after it.

Metrics are served on ``--metrics-port`` or ``PIN_METRICS_PORT`` when one is given, as by
every role — under ``--workers N`` by this supervising process, merged — and outside prod
also on the API port. In prod the API port never shows them (SPEC §11): without a metrics
port the API serves no metrics at all, and says so at start.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import socket
import sys
import tempfile
from typing import TYPE_CHECKING

import structlog

from pin_sessions.bootstrap.api import build_api
from pin_sessions.bootstrap.database import build_runtime, database_endpoint
from pin_sessions.cli.common import (
    EXIT_FAILURE,
    add_metrics_port,
    configure_process_logging,
    metrics_endpoint,
    metrics_port,
    print_banner,
)
from pin_sessions.platform.api_workers import ApiWorkers, WorkerApi, WorkerFailedToStart
from pin_sessions.platform.metrics import merged_registry
from pin_sessions.platform.process import install_stop_signals, run_process, run_roles
from pin_sessions.platform.serving import ApiRole, ApiServer, bound_port, listen_socket
from pin_sessions.platform.tracing import process_tracing
from pin_sessions.settings import is_wildcard_host, listening_url, load_settings

if TYPE_CHECKING:
    from collections.abc import Callable

    from prometheus_client import CollectorRegistry

    from pin_sessions.cli.common import Commands
    from pin_sessions.platform.runtime import Runtime
    from pin_sessions.settings import Settings

log = structlog.get_logger("pin_sessions.cli")

# prometheus-client reads it when imported: set here, for the workers, before they start.
MULTIPROC_DIR_VARIABLE = "PROMETHEUS_MULTIPROC_DIR"


def add_parsers(commands: Commands) -> None:
    serve = commands.add_parser("serve", help="the HTTP API only")
    add_address_arguments(serve)
    serve.add_argument("--workers", type=int, default=1)
    add_metrics_port(serve)
    serve.set_defaults(run=run)


def add_address_arguments(parser: argparse.ArgumentParser) -> None:
    """``--host`` and ``--port``: unset, the settings decide (``PIN_HTTP__HOST``/``__PORT``)."""
    parser.add_argument("--host", default=None, help="default: PIN_HTTP__HOST (127.0.0.1)")
    parser.add_argument(
        "--port", type=_port, default=None, help="default: PIN_HTTP__PORT (8000); 0: any free port"
    )


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port (0-65535)")
    return port


def bind_api(settings: Settings, args: argparse.Namespace) -> tuple[Settings, socket.socket]:
    """Listen where the flags (else the settings) say; the settings as that address makes them.

    A ``--host``/``--port`` flag wins over ``PIN_HTTP__HOST``/``__PORT``. The returned settings
    carry the address bound, so everything built from them — the token issuer and the
    OAuth metadata when ``PIN_PUBLIC_URL`` is unset, the banner — names the real port.
    """
    host: str = settings.http.host if args.host is None else args.host
    port: int = settings.http.port if args.port is None else args.port
    sock = listen_socket(host, port)
    bound = settings.listening_on(host, bound_port(sock))
    if bound.public_url is None and is_wildcard_host(host):
        log.warning(
            "PIN_PUBLIC_URL is unset: tokens name this machine's loopback address as their "
            "issuer, which other machines cannot reach; set PIN_PUBLIC_URL",
            issuer=bound.effective_public_url,
        )
    return bound, sock


def stop_grace_seconds(settings: Settings) -> float:
    """How long a stop may take: the shutdown delay, the drain, and a second to close."""
    http = settings.http
    return (http.shutdown_delay + http.shutdown_timeout).total_seconds() + 1.0


def run(settings: Settings, args: argparse.Namespace) -> int:
    settings.check_api_can_sign_in()
    metrics_port = api_metrics_port(settings, args)
    settings, sock = bind_api(settings, args)
    with contextlib.closing(sock), database_endpoint(settings) as dsn:
        if args.workers > 1:
            return _serve_workers(
                settings, dsn, sock, args.workers, metrics_port, console=args.console
            )
        with process_tracing("api", os.environ):
            runtime = build_runtime(settings, dsn)
            role = api_role(
                runtime,
                sock,
                on_listening=(
                    (lambda _port: print_banner("PIN Sessions API", api_urls(settings)))
                    if args.console
                    else None
                ),
            )
            with metrics_endpoint(metrics_port, runtime.registry):
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


def api_urls(settings: Settings) -> dict[str, str]:
    """Every page a newcomer may open, in the order they will want them, on the address the
    API listens on (``settings`` as :func:`bind_api` returned them)."""
    base = listening_url(settings.http.host, settings.http.port)
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
    sock: socket.socket,
    workers: int,
    metrics_port: int | None,
    *,
    console: bool,
) -> int:
    metrics_dir = tempfile.mkdtemp(prefix="pin-sessions-metrics-")
    os.environ[MULTIPROC_DIR_VARIABLE] = metrics_dir
    urls = api_urls(settings)
    log.info("serving with workers", workers=workers, url=urls["API"])
    if console:
        print_banner(f"PIN Sessions API ({workers} workers)", urls)
    try:
        # Every worker's samples, merged from their files at each scrape.
        with metrics_endpoint(metrics_port, merged_registry(metrics_dir)):
            ApiWorkers(
                _ApiWorker(dsn, settings.http.host, bound_port(sock)),
                sock,
                workers,
                grace_seconds=stop_grace_seconds(settings),
            ).run()
    except WorkerFailedToStart as exc:
        print(f"pin-sessions: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    finally:
        shutil.rmtree(metrics_dir, ignore_errors=True)
    log.info("stopped")
    return 0


class _ApiWorker:
    """Builds one worker's API of ``serve --workers N`` in the worker (picklable, so the
    supervisor can send it there)."""

    def __init__(self, dsn: str, host: str, port: int) -> None:
        self.dsn = dsn
        self.host = host
        self.port = port

    def __call__(self) -> WorkerApi:
        # A fresh interpreter: it wires itself from the environment it inherited, like
        # any command, on the address its parent bound, and reports its metrics through
        # the shared directory.
        settings = load_settings(os.environ).listening_on(self.host, self.port)
        configure_process_logging(settings)
        tracing = contextlib.ExitStack()
        tracing.enter_context(process_tracing("api", os.environ))
        runtime = build_runtime(settings, self.dsn)
        http = settings.http
        return WorkerApi(
            build_api(runtime, metrics_view=merged_registry(os.environ[MULTIPROC_DIR_VARIABLE])),
            read_timeout=http.read_timeout,
            shutdown_delay=http.shutdown_delay,
            shutdown_timeout=http.shutdown_timeout,
            started=lambda: log_listening(settings),
            stopped=tracing.close,
        )


def api_role(
    runtime: Runtime,
    sock: socket.socket,
    *,
    metrics_view: CollectorRegistry | None = None,
    on_listening: Callable[[int], None] | None = None,
) -> ApiRole:
    """The API on the bound ``sock``, as a role that logs where it listens once it does."""

    def listening(port: int) -> None:
        log_listening(runtime.settings)
        if on_listening is not None:
            on_listening(port)

    http = runtime.settings.http
    server = ApiServer(
        build_api(runtime, metrics_view=metrics_view),
        host=http.host,
        port=http.port,
        sock=sock,
        shutdown_timeout=http.shutdown_timeout,
        read_timeout=http.read_timeout,
    )
    return ApiRole(server, on_listening=listening, shutdown_delay=http.shutdown_delay)


def log_listening(settings: Settings) -> None:
    """The line that says where the API is reached, once it serves."""
    urls = api_urls(settings)
    log.info(
        "listening",
        url=urls.pop("API"),
        publicUrl=settings.effective_public_url,
        **{name.lower(): url for name, url in urls.items()},
    )

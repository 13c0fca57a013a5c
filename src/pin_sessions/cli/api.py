"""What serves the API, for ``serve`` and ``up``: imported by them when they run, so that the
processes of every other role never import the HTTP stack (FastAPI, uvicorn, httpx)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import sys
import tempfile
from collections.abc import Callable

import structlog
from prometheus_client import CollectorRegistry

from pin_sessions.bootstrap.api import build_api
from pin_sessions.bootstrap.database import build_runtime
from pin_sessions.cli.common import (
    EXIT_FAILURE,
    configure_process_logging,
    metrics_endpoint,
    print_banner,
)
from pin_sessions.cli.serve import api_urls, stop_grace_seconds
from pin_sessions.platform.api_workers import ApiWorkers, WorkerApi, WorkerFailedToStart
from pin_sessions.platform.listening import bound_port
from pin_sessions.platform.metrics import merged_registry
from pin_sessions.platform.process import install_stop_signals, run_roles
from pin_sessions.platform.runtime import Runtime
from pin_sessions.platform.serving import ApiRole, ApiServer
from pin_sessions.platform.tracing import process_tracing
from pin_sessions.settings import Settings, load_settings

log = structlog.get_logger("pin_sessions.cli")

# prometheus-client reads it when imported: set here, for the workers, before they start.
MULTIPROC_DIR_VARIABLE = "PROMETHEUS_MULTIPROC_DIR"


async def serve_api(role: ApiRole, settings: Settings) -> None:
    stop = asyncio.Event()
    install_stop_signals(stop)
    await run_roles([role], stop, grace_seconds=stop_grace_seconds(settings))


def serve_workers(
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

"""``pin-sessions serve [--host] [--port] [--workers N]``: the HTTP API only."""

from __future__ import annotations

import asyncio
import os
from typing import TYPE_CHECKING

import structlog

from pin_sessions.bootstrap import build_api, build_runtime, database_endpoint
from pin_sessions.platform.process import install_stop_signals, run_process, run_roles
from pin_sessions.platform.serving import ApiRole, ApiServer
from pin_sessions.platform.tracing import process_tracing
from pin_sessions.settings import load_settings

if TYPE_CHECKING:
    import argparse

    from fastapi import FastAPI

    from pin_sessions.cli.common import Commands
    from pin_sessions.platform.runtime import Runtime
    from pin_sessions.settings import Settings

log = structlog.get_logger("pin_sessions.cli")

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
STOP_GRACE_SECONDS = 4.0
# What uvicorn imports in each worker process of `serve --workers N`.
WORKER_FACTORY = "pin_sessions.cli.serve:api_from_environment"


def add_parsers(commands: Commands) -> None:
    serve = commands.add_parser("serve", help="the HTTP API only")
    serve.add_argument("--host", default=DEFAULT_HOST)
    serve.add_argument("--port", type=int, default=DEFAULT_PORT)
    serve.add_argument("--workers", type=int, default=1)
    serve.set_defaults(run=run)


def run(settings: Settings, args: argparse.Namespace) -> int:
    settings.check_api_can_sign_in()
    with process_tracing("api", os.environ), database_endpoint(settings) as dsn:
        if args.workers > 1:
            _serve_workers(dsn, args.host, args.port, args.workers)
            return 0
        runtime = build_runtime(settings, dsn)

        async def serve() -> None:
            stop = asyncio.Event()
            install_stop_signals(stop)
            await run_roles(
                [api_role(runtime, args.host, args.port)], stop, grace_seconds=STOP_GRACE_SECONDS
            )

        run_process(serve())
    return 0


def _serve_workers(dsn: str, host: str, port: int, workers: int) -> None:
    import uvicorn

    # Each worker is a fresh process that wires itself from its environment, which it
    # inherits: the database this process settled on (embedded or not) goes with it.
    os.environ["PIN_DATABASE_URL"] = dsn
    uvicorn.run(
        WORKER_FACTORY,
        factory=True,
        host=host,
        port=port,
        workers=workers,
        log_config=None,
        access_log=False,
        # The client address is decided by PIN_TRUSTED_PROXIES, not by uvicorn.
        proxy_headers=False,
    )


def api_from_environment() -> FastAPI:
    """uvicorn's factory for ``serve --workers N``: one worker process's API."""
    settings = load_settings(os.environ)
    if settings.database_url is None:
        raise RuntimeError("serve --workers needs PIN_DATABASE_URL set by the parent process")
    return build_api(build_runtime(settings, settings.database_url.get_secret_value()))


def api_role(runtime: Runtime, host: str, port: int) -> ApiRole:
    """The API as a role that logs where it listens once it does."""

    def listening(bound_port: int) -> None:
        log.info(
            "listening", url=f"http://{host}:{bound_port}", docs=f"http://{host}:{bound_port}/docs"
        )

    return ApiRole(ApiServer(build_api(runtime), host=host, port=port), on_listening=listening)

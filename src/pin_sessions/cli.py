"""``pin-sessions`` — every role of the service from one command line (SPEC §2).

Exit status: 0 success, 1 runtime failure, 2 bad settings or usage.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Sequence

import structlog

from pin_sessions.bootstrap import build_api, build_runtime, database_endpoint
from pin_sessions.platform.embedded import DataDirBusy, DataDirLock
from pin_sessions.platform.logging import configure_logging
from pin_sessions.platform.migrations import migrate
from pin_sessions.platform.process import Role, install_stop_signals, run_roles
from pin_sessions.platform.runtime import Runtime
from pin_sessions.platform.serving import ApiRole, ApiServer
from pin_sessions.settings import Environment, Settings, SettingsError, load_settings

log = structlog.get_logger("pin_sessions.cli")

EXIT_FAILURE = 1
EXIT_USAGE = 2
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
STOP_GRACE_SECONDS = 4.0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pin-sessions", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    up = commands.add_parser("up", help="everything on one machine: database, migrations, API")
    up.add_argument("--host", default=DEFAULT_HOST)
    up.add_argument("--port", type=int, default=DEFAULT_PORT)

    commands.add_parser("migrate", help="apply schema migrations (idempotent)")

    serve = commands.add_parser("serve", help="the HTTP API only")
    serve.add_argument("--host", default=DEFAULT_HOST)
    serve.add_argument("--port", type=int, default=DEFAULT_PORT)
    serve.add_argument("--workers", type=int, default=1)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        settings = load_settings()
    except SettingsError as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_USAGE
    configure_logging(settings.log_level)
    try:
        if args.command == "up":
            return _up(_with_up_defaults(settings), args.host, args.port)
        if args.command == "migrate":
            return _migrate(settings)
        if args.command == "serve":
            return _serve(settings, args.host, args.port, args.workers)
    except DataDirBusy as exc:
        print(f"pin-sessions: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    raise AssertionError(f"unhandled command {args.command}")


def _with_up_defaults(settings: Settings) -> Settings:
    """``up`` is the developer's machine: sign-in codes are readable unless said otherwise."""
    if "PIN_DEV_CODES" in os.environ or settings.env is Environment.PROD:
        return settings
    return settings.model_copy(update={"dev_codes": True})


def _up(settings: Settings, host: str, port: int) -> int:
    with DataDirLock(settings.data_dir), database_endpoint(settings) as dsn:
        runtime = build_runtime(settings, dsn)
        asyncio.run(_run_up(runtime, host, port))
    log.info("stopped")
    return 0


async def _run_up(runtime: Runtime, host: str, port: int) -> None:
    stop = asyncio.Event()
    install_stop_signals(stop)
    await runtime.database.open()
    try:
        async with runtime.database.connection() as conn:
            await migrate(conn)
        roles: list[Role] = [_api_role(runtime, host, port)]
        await run_roles(roles, stop, grace_seconds=STOP_GRACE_SECONDS)
    finally:
        await runtime.database.close()


def _api_role(runtime: Runtime, host: str, port: int) -> ApiRole:
    def listening(bound_port: int) -> None:
        log.info(
            "listening", url=f"http://{host}:{bound_port}", docs=f"http://{host}:{bound_port}/docs"
        )

    return ApiRole(ApiServer(build_api(runtime), host=host, port=port), on_listening=listening)


def _migrate(settings: Settings) -> int:
    async def run(dsn: str) -> list[int]:
        runtime = build_runtime(settings, dsn, pool_max_size=1)
        await runtime.database.open()
        try:
            async with runtime.database.connection() as conn:
                return await migrate(conn)
        finally:
            await runtime.database.close()

    with database_endpoint(settings) as dsn:
        applied = asyncio.run(run(dsn))
    print(json.dumps({"applied": applied}))
    return 0


def _serve(settings: Settings, host: str, port: int, workers: int) -> int:
    with database_endpoint(settings) as dsn:
        if workers > 1:
            import uvicorn

            os.environ["PIN_DATABASE_URL"] = dsn
            uvicorn.run(
                "pin_sessions.bootstrap:api_from_environment",
                factory=True,
                host=host,
                port=port,
                workers=workers,
                log_config=None,
                access_log=False,
            )
            return 0
        runtime = build_runtime(settings, dsn)

        async def run() -> None:
            stop = asyncio.Event()
            install_stop_signals(stop)
            await run_roles(
                [_api_role(runtime, host, port)], stop, grace_seconds=STOP_GRACE_SECONDS
            )

        asyncio.run(run())
    return 0

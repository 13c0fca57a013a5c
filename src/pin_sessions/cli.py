"""``pin-sessions`` — every role of the service from one command line (SPEC §2).

Exit status: 0 success, 1 runtime failure, 2 bad settings or usage.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import replace

import structlog

from pin_sessions.bootstrap import (
    JOB_WORKERS,
    api_database,
    build_api,
    build_delivery_roles,
    build_identity_operations,
    build_runtime,
    database_endpoint,
    open_database_endpoint,
    worker_database,
)
from pin_sessions.cli_jobs import add_job_parser, run_job_command
from pin_sessions.cli_messaging import add_messaging_parsers, run_messaging_command
from pin_sessions.identity.domain import E164_PATTERN, PERMISSION_PATTERN
from pin_sessions.identity.errors import UnknownPhoneNumber
from pin_sessions.platform.auth import TokenCodec
from pin_sessions.platform.clock import SystemClock
from pin_sessions.platform.embedded import DatabaseLost, DataDirBusy, DataDirLock, PostmasterWatch
from pin_sessions.platform.logging import configure_logging
from pin_sessions.platform.migrations import migrate
from pin_sessions.platform.process import Role, install_stop_signals, run_roles
from pin_sessions.platform.runtime import Runtime
from pin_sessions.platform.secrets import resolve_server_secrets
from pin_sessions.platform.serving import ApiRole, ApiServer
from pin_sessions.platform.tracing import process_tracing
from pin_sessions.settings import (
    RECOMMENDED_JWT_SECRET_LENGTH,
    Environment,
    Settings,
    SettingsError,
    load_settings,
)

log = structlog.get_logger("pin_sessions.cli")

EXIT_FAILURE = 1
EXIT_USAGE = 2
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
STOP_GRACE_SECONDS = 4.0
# Four jobs and the delivery roles, each using one connection at a time.
UP_WORKERS_POOL_SIZE = 8


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

    add_job_parser(commands)
    add_messaging_parsers(commands)

    token = commands.add_parser("token", help="mint tokens").add_subparsers(
        dest="token_kind", required=True
    )
    m2m = token.add_parser("m2m", help="a machine-to-machine token for the internal APIs")
    m2m.add_argument("--client", required=True)
    # Repeatable: `--scope a b` and `--scope a --scope b` both grant "a b".
    m2m.add_argument("--scope", action="extend", nargs="+", required=True)

    users = commands.add_parser("users", help="manage users' permissions").add_subparsers(
        dest="users_action", required=True
    )
    for action, text in (("grant", "grant permissions"), ("revoke", "withdraw permissions")):
        change = users.add_parser(action, help=f"{text} (effective at the next token issue)")
        change.add_argument("--phone", required=True, help="the user's E.164 phone number")
        change.add_argument(
            "--permission", action="extend", nargs="+", required=True, type=_permission
        )
    return parser


def _permission(value: str) -> str:
    if not PERMISSION_PATTERN.fullmatch(value):
        raise argparse.ArgumentTypeError(f"{value!r} is not a permission such as dev-stats.view")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        settings = load_settings()
    except SettingsError as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_USAGE
    configure_logging(settings.log_level)
    if settings.jwt_secret_is_short:
        # That it is short is all that is said: the value never reaches a log.
        log.warning(
            "PIN_JWT_SECRET is shorter than recommended for HS256",
            recommendedLength=RECOMMENDED_JWT_SECRET_LENGTH,
        )
    try:
        if args.command == "up":
            with process_tracing("up", os.environ):
                return _up(_with_up_defaults(settings), args.host, args.port)
        if args.command == "migrate":
            return _migrate(settings)
        if args.command == "serve":
            with process_tracing("api", os.environ):
                return _serve(settings, args.host, args.port, args.workers)
        if args.command == "job":
            return run_job_command(settings, args)
        if args.command in ("relay", "consume"):
            return run_messaging_command(settings, args)
        if args.command == "token":
            return _token_m2m(settings, args.client, args.scope)
        if args.command == "users":
            return _users(settings, args.users_action, args.phone, args.permission)
    except (DataDirBusy, DatabaseLost) as exc:
        print(f"pin-sessions: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    raise AssertionError(f"unhandled command {args.command}")


def _with_up_defaults(settings: Settings) -> Settings:
    """``up`` is the developer's machine: sign-in codes are readable unless said otherwise."""
    if "PIN_DEV_CODES" in os.environ or settings.env is Environment.PROD:
        return settings
    return settings.model_copy(update={"dev_codes": True})


def _up(settings: Settings, host: str, port: int) -> int:
    with DataDirLock(settings.data_dir), open_database_endpoint(settings) as endpoint:
        dsn = endpoint.dsn
        # The workers share one pool; the API gets its own, bounded one (SPEC §9), so a
        # job's long batch never waits behind requests, nor requests behind a batch.
        runtime = build_runtime(
            settings, dsn, database=worker_database(dsn, max_size=UP_WORKERS_POOL_SIZE)
        )
        api_runtime = replace(runtime, database=api_database(settings, dsn))
        # `up` owns an embedded server: when it dies, the watch starts it again or, failing
        # that, raises DatabaseLost, which stops every role and exits 1.
        watch = [] if endpoint.embedded is None else [PostmasterWatch(endpoint.embedded)]
        asyncio.run(_run_up(runtime, api_runtime, host, port, watch))
    log.info("stopped")
    return 0


async def _run_up(
    runtime: Runtime, api_runtime: Runtime, host: str, port: int, extra_roles: Sequence[Role]
) -> None:
    stop = asyncio.Event()
    install_stop_signals(stop)
    await runtime.database.open()
    try:
        async with runtime.database.connection() as conn:
            await migrate(conn)
        # The jobs, consumers and relay share the runtime's registry, so their metrics show
        # on the API's /metrics.
        roles: list[Role] = [
            _api_role(api_runtime, host, port),
            *(build_worker(runtime) for build_worker in JOB_WORKERS.values()),
            *build_delivery_roles(runtime),
            *extra_roles,
        ]
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
        runtime = build_runtime(settings, dsn, database=worker_database(dsn, max_size=1))
        await runtime.database.open()
        try:
            async with runtime.database.connection() as conn:
                return await migrate(conn)
        finally:
            await runtime.database.close()

    # `migrate` reports what it applied, so the endpoint must not migrate before it.
    with database_endpoint(settings, migrate_embedded=False) as dsn:
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
                # The client address is decided by PIN_TRUSTED_PROXIES, not by uvicorn.
                proxy_headers=False,
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


def _token_m2m(settings: Settings, client: str, scopes: list[str]) -> int:
    """Print an m2m token signed with the server secret the API uses."""
    codec = TokenCodec(resolve_server_secrets(settings).jwt_key)
    print(codec.issue_m2m_token(client, scopes, now=SystemClock().now()))
    return 0


def _users(settings: Settings, action: str, phone: str, permissions: list[str]) -> int:
    """Grant or withdraw permissions; prints the user id and the change, never the phone."""
    if not re.fullmatch(E164_PATTERN, phone):
        print("pin-sessions: --phone must be an E.164 number such as +15550100", file=sys.stderr)
        return EXIT_USAGE

    async def run(dsn: str) -> str:
        runtime = build_runtime(settings, dsn, database=worker_database(dsn, max_size=1))
        await runtime.database.open()
        try:
            operations = build_identity_operations(runtime)
            if action == "grant":
                user_id = await operations.grant_permissions(
                    phone, permissions, runtime.clock.now()
                )
            else:
                user_id = await operations.withdraw_permissions(phone, permissions)
            return str(user_id)
        finally:
            await runtime.database.close()

    with database_endpoint(settings) as dsn:
        try:
            user_id = asyncio.run(run(dsn))
        except UnknownPhoneNumber as exc:
            print(f"pin-sessions: {exc.detail}", file=sys.stderr)
            return EXIT_FAILURE
    print(json.dumps({"userId": user_id, action: sorted(set(permissions))}))
    return 0

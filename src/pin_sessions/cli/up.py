"""``pin-sessions up [--host] [--port]``: everything on one machine.

The database (embedded unless ``PIN_DATABASE_URL`` names one), its migrations, the API and
every worker run as roles of this one process, sharing one metrics registry: on the API's
``/metrics`` outside prod, and on ``--metrics-port`` / ``PIN_METRICS_PORT`` when given. The
API's address is chosen as for ``serve`` (``--host``/``--port``, else
``PIN_HTTP__HOST``/``__PORT``), once the data directory is ours; its public URL is then
written there for the commands run beside it (``platform/served_url.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

import structlog

from pin_sessions.bootstrap.database import (
    api_database,
    build_runtime,
    open_database_endpoint,
    worker_database,
)
from pin_sessions.bootstrap.delivery import build_delivery_roles
from pin_sessions.bootstrap.jobs import JOB_WORKERS
from pin_sessions.cli.common import add_command, add_metrics_port, metrics_endpoint, print_banner
from pin_sessions.cli.serve import (
    add_address_arguments,
    api_metrics_port,
    api_urls,
    bind_api,
    stop_grace_seconds,
)
from pin_sessions.platform.embedded import DataDirLock, PostmasterWatch
from pin_sessions.platform.migrations import migrate
from pin_sessions.platform.process import Role, install_stop_signals, run_process, run_roles
from pin_sessions.platform.served_url import serving_public_url
from pin_sessions.platform.tracing import process_tracing
from pin_sessions.settings import Environment

if TYPE_CHECKING:
    import argparse

    from pin_sessions.cli.common import Commands
    from pin_sessions.platform.runtime import Runtime
    from pin_sessions.settings import Settings

log = structlog.get_logger("pin_sessions.cli")

# Five jobs and the delivery roles, each using one connection at a time, share one pool
# of twice a worker process's.
UP_POOL_SHARE = 2


def add_parsers(commands: Commands) -> None:
    up = add_command(
        commands, "up", "everything on one machine: database, migrations, API, jobs, consumers"
    )
    add_address_arguments(up)
    add_metrics_port(up)
    up.set_defaults(run=run)


def run(settings: Settings, args: argparse.Namespace) -> int:
    settings.check_api_can_sign_in()
    metrics_port = api_metrics_port(settings, args)
    with process_tracing("up", os.environ):
        return _up(with_up_defaults(settings), args, metrics_port, banner=args.console)


def with_up_defaults(settings: Settings) -> Settings:
    """``up`` is the developer's machine: sign-in codes are readable unless said otherwise.

    An unset ``PIN_DEV_CODES`` becomes 1 here, outside prod; a set one is kept as it is.
    """
    if settings.dev_codes is not None or settings.env is Environment.PROD:
        return settings
    return settings.model_copy(update={"dev_codes": True})


def _up(
    settings: Settings, args: argparse.Namespace, metrics_port: int | None, *, banner: bool
) -> int:
    with contextlib.ExitStack() as owned:
        # The data directory first: a second `up` on it is refused for that, whatever its port.
        owned.enter_context(DataDirLock(settings.data_dir))
        settings, sock = bind_api(settings, args)
        owned.enter_context(contextlib.closing(sock))
        # Commands run beside it on this data directory mint tokens with its issuer.
        owned.enter_context(serving_public_url(settings.data_dir, settings.effective_public_url))
        endpoint = owned.enter_context(open_database_endpoint(settings))
        dsn = endpoint.dsn
        # The workers share one pool; the API gets its own, bounded one, so a job's long
        # batch never waits behind requests, nor requests behind a batch.
        runtime = build_runtime(
            settings,
            dsn,
            database=worker_database(
                settings, dsn, max_size=UP_POOL_SHARE * settings.database.worker_pool_max
            ),
        )
        api_runtime = replace(runtime, database=api_database(settings, dsn))
        # `up` owns an embedded server: when it dies, the watch starts it again or, failing
        # that, raises DatabaseLost, which stops every role and exits 1.
        watch = [] if endpoint.embedded is None else [PostmasterWatch(endpoint.embedded)]
        with metrics_endpoint(metrics_port, runtime.registry):
            run_process(_run_up(runtime, api_runtime, sock, watch, banner=banner))
    log.info("stopped")
    return 0


async def _run_up(
    runtime: Runtime,
    api_runtime: Runtime,
    sock: socket.socket,
    extra_roles: Sequence[Role],
    *,
    banner: bool,
) -> None:
    from pin_sessions.cli.api import api_role  # the HTTP stack, only where it serves (serve.run)

    stop = asyncio.Event()
    install_stop_signals(stop)
    await runtime.database.open()
    try:
        async with runtime.database.connection() as conn:
            await migrate(conn)
        # The jobs, consumers and relay share the runtime's registry, so their metrics show
        # on the API's /metrics.
        roles: list[Role] = [
            api_role(
                api_runtime,
                sock,
                on_listening=(
                    (lambda _port: print_banner("PIN Sessions is up", api_urls(runtime.settings)))
                    if banner
                    else None
                ),
            ),
            *(build_worker(runtime) for build_worker in JOB_WORKERS.values()),
            *build_delivery_roles(runtime),
            *extra_roles,
        ]
        await run_roles(roles, stop, grace_seconds=stop_grace_seconds(runtime.settings))
    finally:
        await runtime.database.close()

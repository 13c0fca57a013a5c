"""``pin-sessions job NAME [--once] [--metrics-port PORT]``: one background job.

Without ``--once`` the job's polling loop runs until SIGINT/SIGTERM, which stop it
between phases or chunks (a running statement always finishes), with Prometheus
metrics on ``--metrics-port`` or ``PIN_METRICS_PORT``. With ``--once`` it runs one pass
and prints the result as one JSON object on stdout; a pass that raised exits 1.
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import TYPE_CHECKING

import structlog

from pin_sessions.bootstrap.database import build_runtime, database_endpoint, worker_database
from pin_sessions.bootstrap.jobs import JOB_WORKERS
from pin_sessions.cli.common import (
    EXIT_FAILURE,
    add_command,
    add_metrics_port,
    add_name,
    metrics_endpoint,
    metrics_port,
    role_banner,
)
from pin_sessions.platform.process import install_stop_signals, run_process, run_roles
from pin_sessions.platform.tracing import process_tracing

if TYPE_CHECKING:
    import argparse

    from prometheus_client import CollectorRegistry

    from pin_sessions.cli.common import Commands
    from pin_sessions.platform.jobs import PollingWorker
    from pin_sessions.settings import Settings

log = structlog.get_logger("pin_sessions.cli")

# A stop waits for the statement in flight; chunks are bounded by BatchSize, so this is
# a backstop against a wedged connection, not a deadline the job is expected to meet.
JOB_STOP_GRACE_SECONDS = 60.0


def add_parsers(commands: Commands) -> None:
    job = add_command(commands, "job", "run one background job")
    add_name(job, JOB_WORKERS, "job")
    job.add_argument("--once", action="store_true", help="one pass, result as JSON on stdout")
    add_metrics_port(job)
    job.set_defaults(run=run)


def run(settings: Settings, args: argparse.Namespace) -> int:
    port = metrics_port(settings, args)
    with process_tracing(f"job.{args.name}", os.environ), database_endpoint(settings) as dsn:
        runtime = build_runtime(settings, dsn, database=worker_database(settings, dsn))
        worker = JOB_WORKERS[args.name](runtime)

        async def run_job() -> int:
            await runtime.database.open()
            try:
                if args.once:
                    return await _run_once(worker)
                await _run_loop(worker, runtime.registry, port, args)
                return 0
            finally:
                await runtime.database.close()

        return run_process(run_job())


async def _run_once(worker: PollingWorker) -> int:
    stop = asyncio.Event()
    install_stop_signals(stop)
    result = await worker.run_pass(stop)
    if result is None:
        return EXIT_FAILURE
    print(json.dumps(result.to_json()), flush=True)
    # A pass whose phase failed still reports what it did, but a scheduler running
    # `--once` must see that it failed.
    return 0 if result.succeeded else EXIT_FAILURE


async def _run_loop(
    worker: PollingWorker,
    registry: CollectorRegistry,
    port: int | None,
    args: argparse.Namespace,
) -> None:
    stop = asyncio.Event()
    install_stop_signals(stop)
    with metrics_endpoint(port, registry) as bound:
        role_banner(args, f"pin-sessions job {args.name}", bound)
        await run_roles([worker], stop, grace_seconds=JOB_STOP_GRACE_SECONDS)
    log.info("stopped", role=worker.name)

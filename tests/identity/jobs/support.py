"""Building the identity jobs on a test's runtime, the way the composition root does."""

from __future__ import annotations

import asyncio
from typing import Any

from opentelemetry.trace import Tracer
from prometheus_client import CollectorRegistry

from pin_sessions.identity.jobs.expire_sessions import (
    ExpireSessionsJob,
    build_expire_sessions_job,
)
from pin_sessions.platform.jobs import PollingWorker, RunResult
from pin_sessions.platform.runtime import Runtime
from pin_sessions.settings import ExpireSessionsSettings


def expire_sessions_worker(
    runtime: Runtime,
    registry: CollectorRegistry,
    *,
    tracer: Tracer | None = None,
    **options: Any,
) -> PollingWorker:
    job: ExpireSessionsJob = build_expire_sessions_job(
        runtime.database, ExpireSessionsSettings(**options)
    )
    return PollingWorker(
        job,
        clock=runtime.clock,
        interval=job.options.polling_interval,
        registry=registry,
        tracer=tracer,
    )


async def expire_once(runtime: Runtime, registry: CollectorRegistry, **options: Any) -> RunResult:
    result = await expire_sessions_worker(runtime, registry, **options).run_pass(asyncio.Event())
    assert result is not None
    return result

"""Building the user-activity jobs on a test's runtime, the way the composition root does."""

from __future__ import annotations

import asyncio
from typing import Any

from opentelemetry.trace import Tracer
from prometheus_client import CollectorRegistry

from pin_sessions.platform.database import Database
from pin_sessions.platform.jobs import PollingWorker, RunResult
from pin_sessions.platform.runtime import Runtime
from pin_sessions.settings import ActivityCloserSettings, ActivityRetentionSettings
from pin_sessions.user_activity.jobs.activity_closer import build_activity_closer_job
from pin_sessions.user_activity.jobs.activity_retention import build_activity_retention_job
from tests.support.waiting import wait_until

COUNT_LOCK_WAITERS = """
select count(*) from pg_stat_activity
where datname = current_database() and wait_event_type = 'Lock'
"""


def closer_worker(
    runtime: Runtime,
    registry: CollectorRegistry,
    *,
    tracer: Tracer | None = None,
    database: Database | None = None,
    **options: Any,
) -> PollingWorker:
    """``database`` gives the closer a pool of its own, as a separate process would have."""
    job = build_activity_closer_job(database or runtime.database, ActivityCloserSettings(**options))
    return PollingWorker(
        job,
        clock=runtime.clock,
        interval=job.options.polling_interval,
        registry=registry,
        tracer=tracer,
    )


async def close_once(runtime: Runtime, registry: CollectorRegistry, **options: Any) -> RunResult:
    result = await closer_worker(runtime, registry, **options).run_pass(asyncio.Event())
    assert result is not None
    return result


async def retain_once(runtime: Runtime, registry: CollectorRegistry, **options: Any) -> RunResult:
    job = build_activity_retention_job(runtime.database, ActivityRetentionSettings(**options))
    worker = PollingWorker(
        job, clock=runtime.clock, interval=job.options.polling_interval, registry=registry
    )
    result = await worker.run_pass(asyncio.Event())
    assert result is not None
    return result


async def lock_waiters(runtime: Runtime) -> int:
    """Backends of this database waiting on a lock now."""
    async with runtime.database.connection() as conn:
        count: int = await conn.fetchval(COUNT_LOCK_WAITERS)
    return count


async def wait_for_lock_waiters(runtime: Runtime, count: int) -> None:
    """Until ``count`` backends of this database wait on a lock (read afresh each time)."""

    async def waiting() -> bool:
        async with runtime.database.connection() as conn:
            return bool(await conn.fetchval(COUNT_LOCK_WAITERS) >= count)

    await wait_until(waiting, timeout=60, interval=0.01)

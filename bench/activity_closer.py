"""Benchmark ActivityCloserJob against set-based SQL doing the same writes, in one run.

Seeds one source database (by default 100,000 idle Active sessions, each with one open
property view, among 100,000 Active sessions still in use), then measures each scenario
on its own copy made with ``CREATE DATABASE ... TEMPLATE``:

  (a) baseline: one statement that closes every idle session, ends its open views and
      writes both events per session to the outbox (session-ended, view-ended);
  (b) the job: one pass with the default settings (batches of 500 through
      ``close_sessions``, one transaction each), its run budget lifted so it finishes.

Both write the same rows: every idle session Inactive, every view ended, two outbox rows
per session. Prints one JSON object: closed sessions/s for each, the ratio, the longest
batch transaction, and the issue's targets. Uses ``PIN_DATABASE_URL`` (an account that may
create databases) when set, else a throwaway embedded PostgreSQL.

    python bench/activity_closer.py            # the issue's sizes
    python bench/activity_closer.py --small    # a quick run
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from pin_sessions.platform.clock import FixedClock
from pin_sessions.platform.database import Database
from pin_sessions.platform.embedded import EmbeddedPostgres
from pin_sessions.platform.jobs import PollingWorker
from pin_sessions.platform.logging import configure_logging
from pin_sessions.platform.metrics import new_registry
from pin_sessions.platform.migrations import migrate
from pin_sessions.settings import ActivityCloserSettings
from pin_sessions.user_activity.jobs.activity_closer import (
    ActivityCloserResult,
    build_activity_closer_job,
)

T = TypeVar("T")

# $1 now, $2 last activity, $3 count; each session on its own device.
SEED_SESSIONS = """
insert into user_activity.sessions
    (id, anonymous_id, status, created_at, last_activity_at, device_user_agent, device_type)
select gen_random_uuid(), gen_random_uuid(), 'Active', $1::timestamptz - interval '2 hours',
       $2, 'bench-agent', 'Desktop'
from generate_series(1, $3)
"""

SEED_OPEN_VIEWS = """
insert into user_activity.property_object_views
    (id, session_id, property_object_id, user_id, started_at)
select gen_random_uuid(), id, gen_random_uuid(), null, created_at + interval '1 minute'
from user_activity.sessions
where last_activity_at < $1
"""

# The same writes as close_sessions, for every idle session at once: the floor to beat.
BASELINE_CLOSE = """
with closed as (
    update user_activity.sessions
    set status = 'Inactive', ended_at = $1, duration = last_activity_at - created_at
    where status = 'Active' and last_activity_at < $2
    returning id, anonymous_id, user_id, created_at, last_activity_at, duration
), ended_views as (
    update user_activity.property_object_views as v
    set ended_at = greatest(c.last_activity_at, v.started_at),
        duration = greatest(c.last_activity_at, v.started_at) - v.started_at
    from closed as c
    where v.session_id = c.id and v.ended_at is null
    returning v.id, v.session_id, v.property_object_id, c.user_id, v.started_at, v.ended_at,
              v.duration
), view_events as (
    insert into messaging.outbox
        (message_id, topic, event_type, version, aggregate_type, aggregate_id, payload,
         created_at)
    select gen_random_uuid(), 'pin.user-activity.property-object-view-ended.v1',
           'pin.user-activity.property-object-view-ended', 1, 'PropertyObjectView', id::text,
           jsonb_build_object('ViewId', id, 'SessionId', session_id,
                              'PropertyObjectId', property_object_id, 'UserId', user_id,
                              'StartedAt', started_at, 'EndedAt', ended_at,
                              'DurationSeconds', extract(epoch from duration)::bigint),
           $1
    from ended_views
)
insert into messaging.outbox
    (message_id, topic, event_type, version, aggregate_type, aggregate_id, payload, created_at)
select gen_random_uuid(), 'pin.user-activity.session-ended.v1',
       'pin.user-activity.session-ended', 1, 'Session', id::text,
       jsonb_build_object('SessionId', id, 'AnonymousId', anonymous_id, 'UserId', user_id,
                          'CreatedAt', created_at, 'LastActivityAt', last_activity_at,
                          'DurationSeconds', extract(epoch from duration)::bigint),
       $1
from closed
"""

COUNT_WRITES = """
select (select count(*) from user_activity.sessions where status = 'Inactive') as closed,
       (select count(*) from user_activity.property_object_views where ended_at is not null)
           as views_ended,
       (select count(*) from messaging.outbox) as outbox_rows
"""


@contextmanager
def admin_dsn() -> Iterator[str]:
    external = os.environ.get("PIN_DATABASE_URL")
    if external:
        yield external
        return
    with tempfile.TemporaryDirectory(prefix="pin-bench-") as workdir:
        embedded = EmbeddedPostgres(Path(workdir) / "pg", delete_on_stop=True)
        embedded.start()
        try:
            yield embedded.admin_dsn()
        finally:
            embedded.stop()


def with_database(dsn: str, name: str) -> str:
    return urlunsplit(urlsplit(dsn)._replace(path=f"/{name}"))


async def on_connection(dsn: str, work: Callable[[asyncpg.Connection[Any]], Awaitable[T]]) -> T:
    conn = await asyncpg.connect(dsn)
    try:
        return await work(conn)
    finally:
        await conn.close()


async def seed(dsn: str, now: datetime, args: argparse.Namespace) -> None:
    async def work(conn: asyncpg.Connection[Any]) -> None:
        await migrate(conn)
        await conn.execute(SEED_SESSIONS, now, now - timedelta(hours=1), args.idle)
        await conn.execute(SEED_SESSIONS, now, now, args.active)
        await conn.execute(SEED_OPEN_VIEWS, now - timedelta(minutes=30))
        await conn.execute("vacuum analyze")

    await on_connection(dsn, work)


async def writes(conn: asyncpg.Connection[Any]) -> dict[str, int]:
    row = await conn.fetchrow(COUNT_WRITES)
    assert row is not None
    return dict(row)


async def baseline(dsn: str, now: datetime, threshold: timedelta) -> tuple[float, dict[str, int]]:
    async def work(conn: asyncpg.Connection[Any]) -> tuple[float, dict[str, int]]:
        started = time.perf_counter()
        async with conn.transaction():
            await conn.execute(BASELINE_CLOSE, now, now - threshold)
        return time.perf_counter() - started, await writes(conn)

    return await on_connection(dsn, work)


async def job_pass(
    dsn: str, now: datetime, options: ActivityCloserSettings
) -> tuple[float, ActivityCloserResult, dict[str, int]]:
    database = Database(dsn, max_size=2)
    await database.open()
    try:
        registry = new_registry()
        job = build_activity_closer_job(database, options, registry)
        worker = PollingWorker(
            job, clock=FixedClock(now), interval=options.polling_interval, registry=registry
        )
        started = time.perf_counter()
        result = await worker.run_pass(asyncio.Event())
        elapsed = time.perf_counter() - started
        assert result is not None and result.succeeded, "the job pass failed; see stderr"
    finally:
        await database.close()
    return elapsed, result, await on_connection(dsn, writes)


async def run(dsn: str, args: argparse.Namespace) -> dict[str, Any]:
    now = datetime.now(UTC)
    # Measure the whole backlog in one pass rather than the 2-minute guard.
    options = ActivityCloserSettings(max_run_duration=timedelta(hours=1))
    source = f"bench_src_{uuid.uuid4().hex[:8]}"
    admin = with_database(dsn, urlsplit(dsn).path.lstrip("/") or "postgres")
    await on_connection(admin, lambda conn: conn.execute(f'create database "{source}"'))
    try:
        started = time.perf_counter()
        await seed(with_database(dsn, source), now, args)
        seeded_s = time.perf_counter() - started

        async def on_copy(name: str, scenario: Callable[[str], Awaitable[T]]) -> T:
            copy = f"bench_{name}_{uuid.uuid4().hex[:8]}"
            await on_connection(
                admin, lambda conn: conn.execute(f'create database "{copy}" template "{source}"')
            )
            try:
                return await scenario(with_database(dsn, copy))
            finally:
                await on_connection(admin, lambda conn: conn.execute(f'drop database "{copy}"'))

        baseline_s, baseline_writes = await on_copy(
            "baseline", lambda copy: baseline(copy, now, options.inactivity_threshold)
        )
        job_s, result, job_writes = await on_copy("job", lambda copy: job_pass(copy, now, options))
    finally:
        await on_connection(admin, lambda conn: conn.execute(f'drop database "{source}"'))

    expected = {"closed": args.idle, "views_ended": args.idle, "outbox_rows": 2 * args.idle}
    assert baseline_writes == expected, baseline_writes
    assert job_writes == expected, job_writes
    assert (result.closed, result.views_closed, result.backlog_remaining) == (
        args.idle,
        args.idle,
        0,
    )
    job_rate = round(args.idle / job_s)
    baseline_rate = round(args.idle / baseline_s)
    ratio = round(job_rate / baseline_rate, 3)
    return {
        "rows": {"idleSessionsWithOpenView": args.idle, "activeSessions": args.active},
        "seedSeconds": round(seeded_s, 1),
        "baseline": {
            "seconds": round(baseline_s, 3),
            "sessionsPerSecond": baseline_rate,
            "outboxRows": baseline_writes["outbox_rows"],
        },
        "job": {
            "batchSize": options.batch_size,
            "seconds": round(job_s, 3),
            "sessionsPerSecond": job_rate,
            "ratioToBaseline": ratio,
            "batches": result.batches,
            "longestBatchTransactionMs": round(result.longest_batch_ms, 1),
            "outboxRows": job_writes["outbox_rows"],
            "once": result.to_json(),
        },
        "targetsMet": {
            "atLeast5000SessionsPerSecond": job_rate >= 5000,
            "atLeast0.5xBaseline": ratio >= 0.5,
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--idle", type=int, default=100_000)
    parser.add_argument("--active", type=int, default=100_000)
    parser.add_argument("--small", action="store_true", help="10k idle among 10k active")
    args = parser.parse_args(argv)
    if args.small:
        args.idle, args.active = 10_000, 10_000
    configure_logging("warning", stream=sys.stderr)
    with admin_dsn() as dsn:
        report = asyncio.run(run(dsn, args))
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

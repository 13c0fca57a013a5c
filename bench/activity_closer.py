"""Benchmark ActivityCloserJob against set-based SQL doing the same writes, in one run.

Seeds one source database (by default 100,000 idle Active sessions, each with one open
property view, among 100,000 Active sessions still in use), then measures each scenario
on its own copy made with ``CREATE DATABASE ... TEMPLATE``:

  (a) baseline: one statement that closes every idle session, ends its open views and
      writes both events per session to the outbox (session-ended, view-ended);
  (b) the job: one pass with the default settings (batches of 500 through
      ``close_sessions``, one transaction each), its run budget lifted so it finishes.

Both write the same rows: every idle session Inactive, every view ended, two outbox rows
per session. The baseline's message ids are UUIDv7 like the job's (``uuidv7()``, from
PostgreSQL 18; random UUIDs before it), so both insert into ``ux_outbox_message_id`` in
order. Prints one JSON object: closed sessions/s for each, the ratio, the longest batch
transaction, CPU seconds of PostgreSQL (the embedded server's processes, exited backends
included) and of the bench process (the job's Python side) per scenario, and the targets.
With ``--profile`` the embedded server loads ``pg_stat_statements`` and each scenario also
reports its costliest statements. Uses ``PIN_DATABASE_URL`` (an account that may create
databases) when set, else a throwaway embedded PostgreSQL.

    python bench/activity_closer.py            # the issue's sizes
    python bench/activity_closer.py --small    # a quick run
    python bench/activity_closer.py --idle 1000000 --active 1000000   # the growth check
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import psutil

from pin_sessions.platform.clock import FixedClock
from pin_sessions.platform.database import Database
from pin_sessions.platform.embedded import EmbeddedPostgres
from pin_sessions.platform.jobs import PollingWorker, RunResult
from pin_sessions.platform.logging import configure_logging
from pin_sessions.platform.metrics import new_registry
from pin_sessions.platform.migrations import migrate
from pin_sessions.settings import ActivityCloserSettings
from pin_sessions.user_activity.jobs.activity_closer import build_activity_closer_job

T = TypeVar("T")

# The first PostgreSQL with a built-in uuidv7().
UUIDV7_SERVER_VERSION = 180000
# How many statements a profiled scenario reports, costliest first.
PROFILE_STATEMENTS = 8
RESET_STATEMENT_STATS = "select pg_stat_statements_reset()"

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
# `{message_id}` is the server's UUIDv7 function where it has one (see baseline_close).
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
    select {message_id}, 'pin.user-activity.property-object-view-ended.v1',
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
select {message_id}, 'pin.user-activity.session-ended.v1',
       'pin.user-activity.session-ended', 1, 'Session', id::text,
       jsonb_build_object('SessionId', id, 'AnonymousId', anonymous_id, 'UserId', user_id,
                          'CreatedAt', created_at, 'LastActivityAt', last_activity_at,
                          'DurationSeconds', extract(epoch from duration)::bigint),
       $1
from closed
"""

STATEMENT_STATS = """
select regexp_replace(left(query, 200), '\\s+', ' ', 'g') as statement, calls,
       round(total_exec_time) as total_ms, round((total_exec_time / calls)::numeric, 3) as mean_ms,
       rows
from pg_stat_statements
where dbid = (select oid from pg_database where datname = $1)
order by total_exec_time desc
limit $2
"""

COUNT_WRITES = """
select (select count(*) from user_activity.sessions where status = 'Inactive') as closed,
       (select count(*) from user_activity.property_object_views where ended_at is not null)
           as views_ended,
       (select count(*) from messaging.outbox) as outbox_rows
"""


@dataclass
class Server:
    """Where the bench runs: its admin DSN, and the embedded server when it owns one."""

    dsn: str
    embedded: EmbeddedPostgres | None = None

    def postmaster(self) -> psutil.Process | None:
        if self.embedded is None:
            return None
        pid_line = (self.embedded.pgdata / "postmaster.pid").read_text().split("\n", 1)[0]
        return psutil.Process(int(pid_line))

    def cpu_seconds(self) -> float | None:
        """CPU time of the embedded server so far: the postmaster, its live children and
        the children it has reaped (backends that have exited); None when external."""
        postmaster = self.postmaster()
        if postmaster is None:
            return None
        own = postmaster.cpu_times()
        total: float = own.user + own.system + own.children_user + own.children_system
        for child in postmaster.children(recursive=True):
            with contextlib.suppress(psutil.NoSuchProcess):
                times = child.cpu_times()
                total += times.user + times.system
        return total

    async def load_statement_stats(self) -> bool:
        """Restart the embedded server with pg_stat_statements loaded; False when external."""
        postmaster = self.postmaster()
        if postmaster is None or self.embedded is None:
            return False
        await on_connection(
            self.dsn,
            lambda conn: conn.execute(
                "alter system set shared_preload_libraries = 'pg_stat_statements'"
            ),
        )
        postmaster.send_signal(signal.SIGINT)
        await asyncio.to_thread(postmaster.wait, 300)
        await asyncio.to_thread(self.embedded.restart)
        await on_connection(
            self.dsn, lambda conn: conn.execute("create extension if not exists pg_stat_statements")
        )
        return True


@contextmanager
def bench_server() -> Iterator[Server]:
    external = os.environ.get("PIN_DATABASE_URL")
    if external:
        yield Server(external)
        return
    with tempfile.TemporaryDirectory(prefix="pin-bench-") as workdir:
        embedded = EmbeddedPostgres(Path(workdir) / "pg", delete_on_stop=True)
        embedded.start()
        try:
            yield Server(embedded.admin_dsn(), embedded)
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


@dataclass
class Cost:
    """What one scenario cost: wall seconds, and CPU seconds of PostgreSQL and of the bench."""

    seconds: float = 0.0
    postgres_cpu: float | None = None
    bench_cpu: float = 0.0
    statements: list[dict[str, Any]] | None = None

    def to_json(self, sessions: int) -> dict[str, Any]:
        per_session = {"benchCpuUs": round(self.bench_cpu / sessions * 1e6, 1)}
        if self.postgres_cpu is not None:
            per_session["postgresCpuUs"] = round(self.postgres_cpu / sessions * 1e6, 1)
        report: dict[str, Any] = {
            "seconds": round(self.seconds, 3),
            "sessionsPerSecond": round(sessions / self.seconds),
            "postgresCpuSeconds": None
            if self.postgres_cpu is None
            else round(self.postgres_cpu, 1),
            "benchCpuSeconds": round(self.bench_cpu, 1),
            "perSession": per_session,
        }
        if self.statements is not None:
            report["statements"] = self.statements
        return report


@asynccontextmanager
async def measured(server: Server, database: str, profile: bool) -> AsyncIterator[Cost]:
    """Wall time and CPU of the block; with ``profile``, its costliest statements too."""
    cost = Cost()
    if profile:
        await on_connection(server.dsn, lambda conn: conn.execute(RESET_STATEMENT_STATS))
    postgres_before = server.cpu_seconds()
    bench_before = time.process_time()
    started = time.perf_counter()
    yield cost
    cost.seconds = time.perf_counter() - started
    cost.bench_cpu = time.process_time() - bench_before
    postgres_after = server.cpu_seconds()
    if postgres_before is not None and postgres_after is not None:
        cost.postgres_cpu = postgres_after - postgres_before
    if profile:
        rows = await on_connection(
            server.dsn, lambda conn: conn.fetch(STATEMENT_STATS, database, PROFILE_STATEMENTS)
        )
        cost.statements = [
            {
                "statement": row["statement"],
                "calls": row["calls"],
                "totalMs": int(row["total_ms"]),
                "meanMs": float(row["mean_ms"]),
                "rows": row["rows"],
            }
            for row in rows
        ]


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


async def baseline(
    server: Server, database: str, now: datetime, threshold: timedelta, profile: bool
) -> tuple[Cost, dict[str, int], str]:
    async def work(conn: asyncpg.Connection[Any]) -> tuple[Cost, dict[str, int], str]:
        version = int(await conn.fetchval("show server_version_num"))
        message_id = "uuidv7()" if version >= UUIDV7_SERVER_VERSION else "gen_random_uuid()"
        statement = BASELINE_CLOSE.replace("{message_id}", message_id)
        async with measured(server, database, profile) as cost, conn.transaction():
            await conn.execute(statement, now, now - threshold)
        return cost, await writes(conn), message_id

    return await on_connection(with_database(server.dsn, database), work)


async def job_pass(
    server: Server,
    database: str,
    now: datetime,
    options: ActivityCloserSettings,
    profile: bool,
) -> tuple[Cost, RunResult, dict[str, int]]:
    dsn = with_database(server.dsn, database)
    pool = Database(dsn, max_size=2)
    await pool.open()
    try:
        registry = new_registry()
        job = build_activity_closer_job(pool, options)
        worker = PollingWorker(
            job, clock=FixedClock(now), interval=options.polling_interval, registry=registry
        )
        async with measured(server, database, profile) as cost:
            result = await worker.run_pass(asyncio.Event())
        assert result is not None and result.succeeded, "the job pass failed; see stderr"
    finally:
        await pool.close()
    return cost, result, await on_connection(dsn, writes)


def summarise(costs: list[Cost], sessions: int) -> dict[str, Any]:
    """A scenario over its rounds: the median of each figure, and each round's seconds."""

    def median(values: list[float | None]) -> float | None:
        known = [value for value in values if value is not None]
        return statistics.median(known) if known else None

    typical = Cost(
        seconds=statistics.median(cost.seconds for cost in costs),
        postgres_cpu=median([cost.postgres_cpu for cost in costs]),
        bench_cpu=statistics.median(cost.bench_cpu for cost in costs),
        statements=costs[0].statements,
    )
    return typical.to_json(sessions) | {"roundsSeconds": [round(c.seconds, 1) for c in costs]}


async def run(server: Server, args: argparse.Namespace) -> dict[str, Any]:
    now = datetime.now(UTC)
    # Measure the whole backlog in one pass rather than the 2-minute guard.
    options = ActivityCloserSettings(max_run_duration=timedelta(hours=1))
    if args.batch_size is not None:
        options = options.model_copy(update={"batch_size": args.batch_size})
    profile = args.profile and await server.load_statement_stats()
    source = f"bench_src_{uuid.uuid4().hex[:8]}"
    admin = server.dsn
    expected = {"closed": args.idle, "views_ended": args.idle, "outbox_rows": 2 * args.idle}

    async def on_admin(statement: str) -> None:
        await on_connection(admin, lambda conn: conn.execute(statement))

    async def on_copy(name: str, scenario: Callable[[str], Awaitable[T]]) -> T:
        copy = f"bench_{name}_{uuid.uuid4().hex[:8]}"
        await on_admin(f'create database "{copy}" template "{source}"')
        try:
            return await scenario(copy)
        finally:
            await on_admin(f'drop database "{copy}"')

    async def run_baseline() -> None:
        cost, written, message_ids[0] = await on_copy(
            "baseline",
            lambda copy: baseline(server, copy, now, options.inactivity_threshold, profile),
        )
        assert written == expected, written
        baseline_costs.append(cost)

    async def run_job() -> None:
        cost, result, written = await on_copy(
            "job", lambda copy: job_pass(server, copy, now, options, profile)
        )
        assert written == expected, written
        assert (result.count("closed"), result.count("viewsClosed"), result.backlog_remaining) == (
            args.idle,
            args.idle,
            0,
        )
        job_costs.append(cost)
        results.append(result)

    baseline_costs: list[Cost] = []
    job_costs: list[Cost] = []
    results: list[RunResult] = []
    message_ids = [""]
    await on_admin(f'create database "{source}"')
    try:
        started = time.perf_counter()
        await seed(with_database(server.dsn, source), now, args)
        seeded_s = time.perf_counter() - started
        # Alternating which goes first, so a neighbour's burst or a drift of the
        # machine falls on both alike.
        for round_number in range(args.rounds):
            first, second = (
                (run_baseline, run_job) if round_number % 2 == 0 else (run_job, run_baseline)
            )
            await first()
            await second()
    finally:
        await on_admin(f'drop database "{source}"')

    baseline_report = summarise(baseline_costs, args.idle)
    job_report = summarise(job_costs, args.idle)
    ratio = round(job_report["sessionsPerSecond"] / baseline_report["sessionsPerSecond"], 3)
    round_ratios = [
        round(b.seconds / j.seconds, 3) for b, j in zip(baseline_costs, job_costs, strict=True)
    ]
    return {
        "rows": {"idleSessionsWithOpenView": args.idle, "activeSessions": args.active},
        "seedSeconds": round(seeded_s, 1),
        "rounds": args.rounds,
        "baseline": baseline_report
        | {"messageIds": message_ids[0], "outboxRows": expected["outbox_rows"]},
        "job": job_report
        | {
            "batchSize": options.batch_size,
            "ratioToBaseline": ratio,
            "roundRatios": round_ratios,
            "batches": results[0].phases["close"].progress.batches,
            "longestBatchTransactionMs": round(
                max(r.phases["close"].progress.longest_batch_ms for r in results), 1
            ),
            "outboxRows": expected["outbox_rows"],
            "once": results[0].to_json(),
        },
        "targetsMet": {
            "atLeast5000SessionsPerSecond": job_report["sessionsPerSecond"] >= 5000,
            "atLeast0.5xBaseline": ratio >= 0.5,
            "atLeast0.6xBaseline": ratio >= 0.6,
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--idle", type=int, default=100_000)
    parser.add_argument("--active", type=int, default=100_000)
    parser.add_argument("--small", action="store_true", help="10k idle among 10k active")
    parser.add_argument(
        "--batch-size", type=int, default=None, help="the job's batch size (default: its setting)"
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="baseline and job this many times each, alternating which goes first",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="load pg_stat_statements (embedded server) and report each scenario's statements",
    )
    args = parser.parse_args(argv)
    if args.small:
        args.idle, args.active = 10_000, 10_000
    configure_logging("warning", stream=sys.stderr)
    with bench_server() as server:
        report = asyncio.run(run(server, args))
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

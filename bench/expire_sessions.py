"""Benchmark ExpireSessionsJob against a plain set-based UPDATE, on identical data.

Seeds one source database (by default 1,000,000 expired Active refresh sessions and
100,000 expired Pending SICR among 1,000,000 live sessions), then measures each
scenario on its own copy made with ``CREATE DATABASE ... TEMPLATE``:

  (a) baseline: one plain UPDATE per phase;
  (b) the job in default mode (BatchSize above the backlog: one UPDATE per phase);
  (c) the job chunked at BatchSize (5000);
  (d) job passes with nothing to expire, over the live rows (after (c), vacuumed).

With nothing expired (``--expired-refresh 0 --expired-sicr 0``) only (d) runs, on the
source database itself: the growth check, a no-op pass over millions of live rows. The
table is loaded without its indexes and constraints, which are built afterwards (faster
than maintaining them row by row), then vacuumed and analysed as autovacuum would.

(d) runs ``--noop-rounds`` rounds of ``--noop-passes`` passes each. A round starts cold:
the embedded server is restarted (empty shared buffers; the operating system's page
cache stays warm) and the worker gets a new pool (a new backend, no statement prepared
yet); its first pass is the cold one, the others are warm, as a polling worker's passes
are. With ``PIN_DATABASE_URL`` a round only opens a new pool. Each count's plan is shown
once, from ``EXPLAIN (ANALYZE, BUFFERS)`` after the rounds.

Prints one JSON object: rows/s, ratio to the baseline, the longest chunk transaction in
ms and the no-op pass in ms (cold and warm, p50 and max), with the issue's targets. Uses
``PIN_DATABASE_URL`` (an account that may create databases) when set, else a throwaway
embedded PostgreSQL.

    python bench/expire_sessions.py            # the issue's sizes
    python bench/expire_sessions.py --small    # a quick run
    python bench/expire_sessions.py --live 10000000 --expired-refresh 0 --expired-sicr 0
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import psutil

from pin_sessions.identity.jobs.expire_sessions import (
    build_expire_sessions_job,
)
from pin_sessions.identity.repository.loaded import QUERIES
from pin_sessions.platform.clock import FixedClock
from pin_sessions.platform.database import Database
from pin_sessions.platform.embedded import EmbeddedPostgres
from pin_sessions.platform.jobs import PollingWorker, RunResult
from pin_sessions.platform.logging import configure_logging
from pin_sessions.platform.metrics import new_registry
from pin_sessions.platform.migrations import migrate
from pin_sessions.settings import ExpireSessionsSettings

SECOND = timedelta(seconds=1)

SEED_USER = """
insert into identity.users (id, phone_number, created_at) values ($1, '+15550000000', $2)
"""

# Expiry instants are spread evenly over a window. With `$6` false (the default layout)
# they rise with insertion order, as in production: a session expires 30 days after it
# was written (sliding rotation writes a new row), a SICR 5 minutes after. With `$6`
# true they are shuffled across the table: the adversarial layout for a claim in
# expires_at order, which then touches the heap at random.
SEED_REFRESH_SESSIONS = """
insert into identity.refresh_sessions
    (id, user_id, family_id, token_hash, status, created_at, expires_at, last_used_at,
     device_user_agent)
select gen_random_uuid(), $1, gen_random_uuid(),
       sha256(convert_to(gen_random_uuid()::text, 'UTF8')), 'Active',
       $2::timestamptz - interval '60 days',
       $2::timestamptz + $4::interval
           + (case when $6 then random() else n::float8 / $3 end) * $5::interval,
       $2::timestamptz - interval '1 day', 'bench-agent'
from generate_series(1, $3) as n
"""

SEED_SICR = """
insert into identity.sign_in_confirmation_requests
    (id, phone_number, code_hash, status, created_at, expires_at)
select gen_random_uuid(), '+15550000000', '\\x00'::bytea, 'Pending',
       $1::timestamptz - interval '1 day',
       $1::timestamptz - interval '1 second'
           - (case when $3 then random() else 1 - n::float8 / $2 end) * interval '20 hours'
from generate_series(1, $2) as n
"""

# A table's own constraints (other than checks) and indexes, and the foreign keys that
# point at it, as the statements that recreate them.
TABLE_CONSTRAINTS = """
select format('alter table %s drop constraint %I', conrelid::regclass, conname) as drop_sql,
       format('alter table %s add constraint %I %s', conrelid::regclass, conname,
              pg_get_constraintdef(oid)) as create_sql,
       confrelid = $1::regclass and conrelid <> $1::regclass as incoming
from pg_constraint
where (conrelid = $1::regclass and contype in ('p', 'u', 'f'))
   or (confrelid = $1::regclass and contype = 'f')
order by incoming desc, contype = 'f' desc
"""

TABLE_INDEXES = """
select format('drop index %s', indexrelid::regclass) as drop_sql,
       pg_get_indexdef(indexrelid) as create_sql
from pg_index
where indrelid = $1::regclass
  and not exists (select 1 from pg_constraint where conindid = indexrelid)
"""

PLAN_SUMMARY_KEYS = ("Node Type", "Index Name", "Actual Rows", "Heap Fetches")


@dataclass
class Server:
    """Where the bench runs: its admin DSN, and the embedded server when it owns one."""

    dsn: str
    embedded: EmbeddedPostgres | None = None

    def restart(self) -> bool:
        """Stop the embedded server (fast shutdown) and start it again; False when external.

        Shared buffers start empty after this; the operating system's page cache does not.
        """
        if self.embedded is None:
            return False
        pid_line = (self.embedded.pgdata / "postmaster.pid").read_text().split("\n", 1)[0]
        postmaster = psutil.Process(int(pid_line))
        postmaster.send_signal(signal.SIGINT)
        postmaster.wait(timeout=300)
        self.embedded.restart()
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


async def admin(dsn: str, statement: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(statement)
    finally:
        await conn.close()


@contextmanager
def timed(into: dict[str, float], name: str) -> Iterator[None]:
    started = time.perf_counter()
    yield
    into[name] = round(time.perf_counter() - started, 1)


async def load_then_index(
    conn: asyncpg.Connection[Any], table: str, load: Callable[[], Any]
) -> dict[str, float]:
    """Run ``load`` with ``table``'s indexes and keys dropped, then build them again.

    Building an index once over the loaded rows is much faster than maintaining it
    row by row, and checking a foreign key once is faster than a trigger per row.
    """
    constraints = await conn.fetch(TABLE_CONSTRAINTS, table)
    indexes = await conn.fetch(TABLE_INDEXES, table)
    for row in [*constraints, *indexes]:
        await conn.execute(row["drop_sql"])
    seconds: dict[str, float] = {}
    with timed(seconds, "load"):
        await load()
    with timed(seconds, "index"):
        # Indexes first, then constraints: primary and unique keys before the foreign
        # keys that need them (the reverse of the drop order).
        for row in [*indexes, *reversed(constraints)]:
            await conn.execute(row["create_sql"])
    return seconds


async def seed(dsn: str, now: datetime, args: argparse.Namespace) -> dict[str, float]:
    conn = await asyncpg.connect(dsn)
    try:
        await migrate(conn)
        # For the index builds after the load; the bench's own session only.
        await conn.execute("set maintenance_work_mem = '512MB'")
        user_id = uuid.uuid4()
        shuffled = args.layout == "shuffled"
        await conn.execute(SEED_USER, user_id, now)
        month = timedelta(days=30)

        async def load() -> None:
            # Expired within the last 30 days; live for 1 to 31 more days.
            await conn.execute(
                SEED_REFRESH_SESSIONS,
                user_id,
                now,
                args.expired_refresh,
                -month,
                month - SECOND,
                shuffled,
            )
            await conn.execute(
                SEED_REFRESH_SESSIONS, user_id, now, args.live, timedelta(days=1), month, shuffled
            )

        seconds = await load_then_index(conn, "identity.refresh_sessions", load)
        await conn.execute(SEED_SICR, now, args.expired_sicr, shuffled)
        with timed(seconds, "vacuumAnalyze"):
            await conn.execute("vacuum analyze")
        return seconds
    finally:
        await conn.close()


async def baseline(dsn: str, now: datetime) -> float:
    conn = await asyncpg.connect(dsn)
    try:
        started = time.perf_counter()
        await QUERIES.expire_refresh_sessions.execute(conn, now=now)
        await QUERIES.expire_sicr.execute(conn, now=now)
        elapsed: float = time.perf_counter() - started
        return elapsed
    finally:
        await conn.close()


async def job_pass(
    dsn: str, now: datetime, batch_size: int, *, passes: int = 1
) -> tuple[list[float], RunResult]:
    """``passes`` passes of one worker on a new pool; the seconds of each, the last result."""
    database = Database(dsn, max_size=2)
    await database.open()
    try:
        registry = new_registry()
        options = ExpireSessionsSettings(batch_size=batch_size)
        job = build_expire_sessions_job(database, options)
        worker = PollingWorker(
            job, clock=FixedClock(now), interval=options.polling_interval, registry=registry
        )
        timings, result = [], None
        for _ in range(passes):
            started = time.perf_counter()
            result = await worker.run_pass(asyncio.Event())
            timings.append(time.perf_counter() - started)
        assert result is not None, "the job pass raised; see the log on stderr"
        return timings, result
    finally:
        await database.close()


async def count_plans(dsn: str, now: datetime) -> dict[str, dict[str, Any]]:
    """Each phase's backlog count under EXPLAIN (ANALYZE, BUFFERS): its scan and its cost."""
    conn = await asyncpg.connect(dsn)
    try:
        plans = {}
        for phase, statement in (
            ("refresh", QUERIES.count_expired_refresh_sessions.text),
            ("sicr", QUERIES.count_expired_sicr.text),
        ):
            explained = await conn.fetchval(
                f"explain (analyze, buffers, format json) {statement}", now
            )
            top = json.loads(explained)[0]
            scan = top["Plan"]["Plans"][0]
            plans[phase] = {key: scan[key] for key in PLAN_SUMMARY_KEYS if key in scan} | {
                "sharedBuffers": scan["Shared Hit Blocks"] + scan["Shared Read Blocks"],
                "executionMs": top["Execution Time"],
            }
        return plans
    finally:
        await conn.close()


def _expired(result: RunResult) -> int:
    """Rows both phases flipped."""
    return result.count("refreshExpired") + result.count("sicrExpired")


def spread(seconds: list[float]) -> dict[str, float]:
    return {
        "p50Ms": round(statistics.median(seconds) * 1000, 2),
        "maxMs": round(max(seconds) * 1000, 2),
    }


async def noop_passes(
    dsn: str, now: datetime, server: Server, args: argparse.Namespace
) -> dict[str, Any]:
    """Rounds of passes with nothing to expire: each round's first pass cold, the rest warm."""
    cold: list[float] = []
    warm: list[float] = []
    restarted = False
    for _ in range(args.noop_rounds):
        restarted = await asyncio.to_thread(server.restart)
        timings, result = await job_pass(dsn, now, args.batch_size, passes=args.noop_passes)
        assert _expired(result) == 0 and result.backlog_remaining == 0, result.to_json()
        cold.append(timings[0])
        warm.extend(timings[1:])
    return {
        "rounds": args.noop_rounds,
        "passesPerRound": args.noop_passes,
        "coldMeans": "server restarted, new pool" if restarted else "new pool",
        "cold": spread(cold),
        "warm": spread(warm),
        "countPlans": await count_plans(dsn, now),
        "targetsMet": {
            "warmP50Under20Ms": statistics.median(warm) < 0.020,
            "everyPassUnder20Ms": max(cold + warm) < 0.020,
        },
    }


async def run_noop_only(server: Server, args: argparse.Namespace) -> dict[str, Any]:
    """The growth check: live rows only, measured on the seeded database itself."""
    now = datetime.now(UTC)
    source = f"bench_src_{uuid.uuid4().hex[:8]}"
    await admin(server.dsn, f'create database "{source}"')
    try:
        seeded = await seed(with_database(server.dsn, source), now, args)
        noop = await noop_passes(with_database(server.dsn, source), now, server, args)
    finally:
        await admin(server.dsn, f'drop database if exists "{source}"')
    return {"rows": rows(args), "seedSeconds": seeded, "noopPass": noop}


def rows(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "expiredRefreshSessions": args.expired_refresh,
        "expiredSicr": args.expired_sicr,
        "liveRefreshSessions": args.live,
        "layout": args.layout,
    }


async def run(server: Server, args: argparse.Namespace) -> dict[str, Any]:
    dsn = server.dsn
    now = datetime.now(UTC)
    source = f"bench_src_{uuid.uuid4().hex[:8]}"
    await admin(dsn, f'create database "{source}"')
    expired: int = args.expired_refresh + args.expired_sicr
    try:
        seeded = await seed(with_database(dsn, source), now, args)

        async def on_copy(name: str, scenario: Any) -> Any:
            copy = f"bench_{name}_{uuid.uuid4().hex[:8]}"
            await admin(dsn, f'create database "{copy}" template "{source}"')
            try:
                return await scenario(with_database(dsn, copy))
            finally:
                await admin(dsn, f'drop database "{copy}"')

        baseline_s = await on_copy("baseline", lambda copy: baseline(copy, now))
        default_s, default = await on_copy("default", lambda copy: job_pass(copy, now, expired + 1))

        async def chunked_then_noop(copy: str) -> Any:
            chunked = await job_pass(copy, now, args.batch_size)
            await admin(copy, "vacuum analyze")
            return chunked, await noop_passes(copy, now, server, args)

        (chunked_s, chunked), noop = await on_copy("chunked", chunked_then_noop)
    finally:
        await admin(dsn, f'drop database if exists "{source}"')

    def rate(seconds: float) -> int:
        return round(expired / seconds)

    assert _expired(default) == expired
    assert _expired(chunked) == expired
    longest_chunk_ms = max(p.progress.longest_batch_ms for p in chunked.phases.values())
    chunked_ratio = round(rate(chunked_s[0]) / rate(baseline_s), 3)
    return {
        "rows": rows(args),
        "seedSeconds": seeded,
        "baseline": {"seconds": round(baseline_s, 3), "rowsPerSecond": rate(baseline_s)},
        "defaultMode": {
            "seconds": round(default_s[0], 3),
            "rowsPerSecond": rate(default_s[0]),
            "ratioToBaseline": round(rate(default_s[0]) / rate(baseline_s), 3),
        },
        "chunked": {
            "batchSize": args.batch_size,
            "seconds": round(chunked_s[0], 3),
            "rowsPerSecond": rate(chunked_s[0]),
            "ratioToBaseline": chunked_ratio,
            "chunks": sum(p.progress.batches for p in chunked.phases.values()),
            "longestChunkTransactionMs": round(longest_chunk_ms, 1),
        },
        "noopPass": noop,
        "targetsMet": {
            "chunkedAtLeast0.7xBaseline": chunked_ratio >= 0.7,
            "longestChunkUnder1000Ms": longest_chunk_ms < 1000,
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--expired-refresh", type=int, default=1_000_000)
    parser.add_argument("--expired-sicr", type=int, default=100_000)
    parser.add_argument("--live", type=int, default=1_000_000)
    parser.add_argument("--batch-size", type=int, default=5000)
    parser.add_argument("--noop-rounds", type=int, default=5, help="cold starts of (d)")
    parser.add_argument("--noop-passes", type=int, default=10, help="passes per round of (d)")
    parser.add_argument("--small", action="store_true", help="20k / 2k / 20k rows")
    parser.add_argument(
        "--layout",
        choices=("correlated", "shuffled"),
        default="correlated",
        help="expires_at rising with insertion order (as in production) or shuffled",
    )
    args = parser.parse_args(argv)
    if args.small:
        args.expired_refresh, args.expired_sicr, args.live = 20_000, 2_000, 20_000
    if args.noop_rounds < 1 or args.noop_passes < 2:
        parser.error("(d) needs at least one round of two passes: a cold one and a warm one")
    configure_logging("warning", stream=sys.stderr)
    with bench_server() as server:
        if args.expired_refresh + args.expired_sicr == 0:
            report = asyncio.run(run_noop_only(server, args))
        else:
            report = asyncio.run(run(server, args))
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""dev-stats summary benchmark: a year of session facts, read from the daily rollups, against
the exact query over the facts that the summary ran before, in one run.

    python bench/dev_stats_summary.py [--facts 10000000] [--requests 500] [--duration 20]
                                      [--connections 1,4] [--baseline-runs 3]

1. Seeds ``--facts`` facts into a database migrated up to, not including, the rollup
   migration (bulk SQL over ``generate_series``): session starts evenly over the 366 UTC days
   ending today, durations log-normal (median 5 min, sigma 1.3; 5 % are 0 s), 40 % signed in.
2. Applies the rollup migration, whose backfill builds the day rows from the facts (timed).
3. **baseline**: the summary's former SQL (totals with exact ``percentile_cont``, and the
   by-day series) over the facts of the year, ``--baseline-runs`` times on one connection.
4. **inProcess**: the query part — ``summarize()`` on the API's pool class, the year,
   ``--requests`` sequential calls.
5. **api**: the whole API (``pin-sessions serve``, its own process), ``GET
   /api/dev-stats/sessions/summary`` for the year under wrk's closed loop (one thread, each
   of ``--connections``, ``--duration`` s), with the token of a user granted
   ``dev-stats.view`` by ``pin-sessions users grant`` and signed in through the API.
6. **accuracy**: p50/p90 of the summary against exact ``percentile_cont`` over the facts for
   the year, twelve 30-day windows and 30 single days: relative errors, and the bound.
7. **writes**: facts per second through the consumer's operation (fact + rollup) against the
   former fact-only INSERT, batches of 100 per transaction as the consumer commits them,
   alternating A B A B A B; the facts begin today, so they all update today's row.
8. **fullLengthHistograms**: one session of the longest duration added to every day through
   the consumer's operation, so every day's histogram has all 864 buckets; ``summarize()``
   again (the worst case of the read), and **writes** again (today's row now that long).

Prints one JSON object. PostgreSQL: ``PIN_DATABASE_URL`` (an account that may create
databases) when set, else an embedded server in a temporary directory. Needs ``wrk``
(Debian/Ubuntu: ``apt-get install wrk``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import httpx

from pin_sessions.dev_stats.domain import MAX_PERIOD_DAYS, Period, SessionFact
from pin_sessions.dev_stats.durations import MAX_DURATION_SECONDS, MAX_RELATIVE_ERROR
from pin_sessions.dev_stats.recording import record_session_ended
from pin_sessions.dev_stats.summary import summarize
from pin_sessions.platform.database import Database
from pin_sessions.platform.embedded import EmbeddedPostgres
from pin_sessions.platform.logging import configure_logging
from pin_sessions.platform.metrics import new_registry
from pin_sessions.platform.migrations import (
    CREATE_LEDGER,
    INSERT_APPLIED,
    available_migrations,
    migrate,
)
from pin_sessions.platform.reads import Reads

ROLLUP_MIGRATION = "dev_stats_daily_rollups"
LUA_SCRIPT = Path(__file__).with_name("dev_stats_summary.lua")
SUMMARY_PATH = "/api/dev-stats/sessions/summary"
SEED_CHUNK = 1_000_000
WRITE_BATCH = 100
WRK_MISSING = (
    "bench/dev_stats_summary.py measures the API with wrk, a native HTTP load generator, so "
    "that the client's CPU does not hide the server's; install it (Debian/Ubuntu: "
    "`apt-get install wrk`) and run again."
)

# Facts $1 … $2 (row numbers), starting $3 + (i - 1) · $4; session ids from the row number
# so the primary key grows in order, as facts arriving over time would make it.
SEED_FACTS = """
insert into dev_stats.session_facts
    (session_id, message_id, anonymous_id, user_id, created_at, last_activity_at,
     duration_seconds, recorded_at)
select ('00000000-0000-4000-8000-' || lpad(to_hex(i), 12, '0'))::uuid,
       gen_random_uuid(), gen_random_uuid(),
       case when signed_in then gen_random_uuid() end,
       started, started + seconds * interval '1 second', seconds,
       started + seconds * interval '1 second'
from (
    select i,
           $3::timestamptz + (i - 1) * $4::interval as started,
           random() < 0.4 as signed_in,
           case when random() < 0.05 then 0
                else least(round(300 * exp(1.3 * sqrt(-2 * ln(1 - random()))
                                              * cos(2 * pi() * random()))),
                           2147483647)::int
           end as seconds
    from generate_series($1::bigint, $2::bigint) as i
) as g
"""

# The summary's SQL before the rollups, verbatim: the baseline.
FORMER_SELECT_TOTALS = """
select count(*) as sessions,
       count(*) filter (where user_id is null) as guest_sessions,
       count(*) filter (where user_id is not null) as user_sessions,
       avg(duration_seconds)::float8 as avg_duration,
       percentile_cont(0.5) within group (order by duration_seconds) as p50_duration,
       percentile_cont(0.9) within group (order by duration_seconds) as p90_duration
from dev_stats.session_facts
where created_at >= $1::date::timestamp at time zone 'UTC'
  and created_at < ($2::date + 1)::timestamp at time zone 'UTC'
"""

FORMER_SELECT_BY_DAY = """
select day::date as day,
       count(f.session_id) as sessions,
       count(f.session_id) filter (where f.user_id is null) as guest_sessions,
       count(f.session_id) filter (where f.user_id is not null) as user_sessions,
       avg(f.duration_seconds)::float8 as avg_duration
from generate_series($1::date, $2::date, interval '1 day') as day
left join dev_stats.session_facts f
  on f.created_at >= day::date::timestamp at time zone 'UTC'
 and f.created_at < (day::date + 1)::timestamp at time zone 'UTC'
group by day
order by day
"""

# The consumer's statement before the rollups: the floor for the write cost.
FORMER_INSERT_FACT = """
insert into dev_stats.session_facts
    (session_id, message_id, anonymous_id, user_id, created_at, last_activity_at,
     duration_seconds, recorded_at)
values ($1, $2, $3, $4, $5, $6, $7, $8)
on conflict (session_id) do nothing
"""

# As stored: after compression, when PostgreSQL compressed the row's histogram.
SELECT_TODAYS_ROW_BYTES = """
select pg_column_size(r.*) from dev_stats.daily_sessions as r
where day = (now() at time zone 'UTC')::date
"""

SELECT_HISTOGRAM_LENGTHS = """
select avg(length(duration_histogram) / 4)::float8 as mean, max(length(duration_histogram) / 4)
from dev_stats.daily_sessions
"""


# --- database ----------------------------------------------------------------------------


@contextmanager
def server_dsn() -> Iterator[str]:
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


async def on_connection(dsn: str, work: Callable[[asyncpg.Connection[Any]], Awaitable[Any]]) -> Any:
    conn = await asyncpg.connect(dsn)
    try:
        return await work(conn)
    finally:
        await conn.close()


async def migrate_before_rollups(conn: asyncpg.Connection[Any]) -> None:
    """Every migration before the rollup one, in ``migrate``'s ledger, so it applies the rest."""
    await conn.execute(CREATE_LEDGER)
    for migration in available_migrations():
        if migration.name == ROLLUP_MIGRATION:
            return
        async with conn.transaction():
            await conn.execute(migration.sql)
            await conn.execute(INSERT_APPLIED, migration.version, migration.name)
    raise RuntimeError(f"no migration named {ROLLUP_MIGRATION}")


async def seed(dsn: str, facts: int, first_day: date, now: datetime) -> dict[str, float]:
    async def work(conn: asyncpg.Connection[Any]) -> dict[str, float]:
        await migrate_before_rollups(conn)
        start = datetime.combine(first_day, datetime.min.time(), UTC)
        step = (now - start) / facts
        started = time.perf_counter()
        for first in range(1, facts + 1, SEED_CHUNK):
            last = min(first + SEED_CHUNK - 1, facts)
            await conn.execute(SEED_FACTS, first, last, start, step)
        await conn.execute("vacuum analyze dev_stats.session_facts")
        seeded = time.perf_counter() - started
        started = time.perf_counter()
        applied = await migrate(conn)
        backfill = time.perf_counter() - started
        assert len(applied) >= 1, applied
        await conn.execute("vacuum analyze dev_stats.daily_sessions")
        return {"seedSeconds": round(seeded, 1), "rollupMigrationSeconds": round(backfill, 1)}

    result: dict[str, float] = await on_connection(dsn, work)
    return result


# --- measurements ------------------------------------------------------------------------


def latency_ms(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return {
        "p50Ms": round(statistics.median(ordered) * 1000, 2),
        "p99Ms": round(p99 * 1000, 2),
        "maxMs": round(ordered[-1] * 1000, 2),
    }


async def baseline(dsn: str, period: Period, runs: int) -> dict[str, Any]:
    async def work(conn: asyncpg.Connection[Any]) -> list[float]:
        samples = []
        for _ in range(runs):
            started = time.perf_counter()
            await conn.fetchrow(FORMER_SELECT_TOTALS, period.first, period.last)
            await conn.fetch(FORMER_SELECT_BY_DAY, period.first, period.last)
            samples.append(time.perf_counter() - started)
        return samples

    samples: list[float] = await on_connection(dsn, work)
    return {"runs": runs, "seconds": [round(s, 2) for s in samples], **latency_ms(samples)}


async def in_process(database: Database, period: Period, requests: int) -> dict[str, Any]:
    reads = Reads(database, new_registry())
    for _ in range(5):
        await summarize(reads, period)
    samples = []
    for _ in range(requests):
        started = time.perf_counter()
        await summarize(reads, period)
        samples.append(time.perf_counter() - started)
    return {"requests": requests, **latency_ms(samples)}


async def accuracy(dsn: str, database: Database, today: date) -> dict[str, Any]:
    """Relative error of p50/p90 against exact percentile_cont, over many periods."""
    year = Period(today - timedelta(days=MAX_PERIOD_DAYS - 1), today)
    windows = [
        Period(today - timedelta(days=30 * (k + 1) - 1), today - timedelta(days=30 * k))
        for k in range(12)
    ]
    days = [
        Period(day, day)
        for day in (
            year.first + timedelta(days=n) for n in random.Random(18).sample(range(366), 30)
        )
    ]
    errors: dict[str, list[float]] = {"p50": [], "p90": []}
    year_figures: dict[str, Any] = {}
    reads = Reads(database, new_registry())
    conn = await asyncpg.connect(dsn)
    try:
        for period in [year, *windows, *days]:
            exact = await conn.fetchrow(FORMER_SELECT_TOTALS, period.first, period.last)
            assert exact is not None
            summary = await summarize(reads, period)
            assert summary.sessions == exact["sessions"]
            for key, estimate, truth in (
                ("p50", summary.p50_duration_seconds, exact["p50_duration"]),
                ("p90", summary.p90_duration_seconds, exact["p90_duration"]),
            ):
                assert estimate is not None and truth
                errors[key].append((estimate - truth) / truth)
                if period is year:
                    year_figures[key] = {"exact": truth, "summary": round(estimate, 3)}
    finally:
        await conn.close()
    return {
        "bound": round(MAX_RELATIVE_ERROR, 5),
        "periods": {"year": 1, "30DayWindows": len(windows), "singleDays": len(days)},
        "year": year_figures,
        **{
            f"{key}MaxAbsRelativeError": round(max(abs(e) for e in values), 5)
            for key, values in errors.items()
        },
        **{
            f"{key}MeanAbsRelativeError": round(statistics.fmean(abs(e) for e in values), 5)
            for key, values in errors.items()
        },
    }


async def full_length_histograms(database: Database, year: Period, requests: int) -> dict[str, Any]:
    """Worst case of the read: every day's histogram runs to the last bucket."""
    recorded_at = datetime.now(UTC)
    async with database.transaction() as conn:
        for n in range(year.days):
            started = datetime.combine(year.first + timedelta(days=n), datetime.min.time(), UTC)
            await record_session_ended(
                conn, bench_fact(started, MAX_DURATION_SECONDS), now=recorded_at
            )
    return await in_process(database, year, requests)


def bench_fact(started: datetime, seconds: int, *, user: bool = False) -> SessionFact:
    return SessionFact(
        session_id=uuid.uuid4(),
        message_id=uuid.uuid4(),
        anonymous_id=uuid.uuid4(),
        user_id=uuid.uuid4() if user else None,
        created_at=started,
        last_activity_at=started + timedelta(seconds=seconds),
        duration_seconds=seconds,
    )


async def writes(database: Database, facts: int, rounds: int) -> dict[str, Any]:
    """Facts per second through the consumer's operation against the former fact-only INSERT."""
    rng = random.Random(8)

    async def consumer(batch: list[SessionFact], now: datetime) -> None:
        async with database.transaction() as conn:
            for fact in batch:
                await record_session_ended(conn, fact, now=now)

    async def former(batch: list[SessionFact], now: datetime) -> None:
        async with database.transaction() as conn:
            for f in batch:
                await conn.execute(
                    FORMER_INSERT_FACT, f.session_id, f.message_id, f.anonymous_id, f.user_id,
                    f.created_at, f.last_activity_at, f.duration_seconds, now,
                )  # fmt: skip

    rates: dict[str, list[float]] = {"factAndRollup": [], "factOnly": []}
    for _ in range(rounds):
        for name, apply in (("factAndRollup", consumer), ("factOnly", former)):
            now = datetime.now(UTC)
            batch = [
                bench_fact(now - timedelta(seconds=rng.randrange(3_600)), rng.randrange(4_000),
                           user=rng.random() < 0.4)
                for _ in range(facts)
            ]  # fmt: skip
            started = time.perf_counter()
            for first in range(0, facts, WRITE_BATCH):
                await apply(batch[first : first + WRITE_BATCH], now)
            rates[name].append(facts / (time.perf_counter() - started))
    rollup, only = statistics.median(rates["factAndRollup"]), statistics.median(rates["factOnly"])
    async with database.connection() as conn:
        today_row = await conn.fetchval(SELECT_TODAYS_ROW_BYTES)
    return {
        "todaysRowBytes": today_row,
        "factsPerRound": facts,
        "batch": WRITE_BATCH,
        "factAndRollupPerSecond": [round(r) for r in rates["factAndRollup"]],
        "factOnlyPerSecond": [round(r) for r in rates["factOnly"]],
        "ratioMedian": round(rollup / only, 3),
    }


# --- the API -----------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextmanager
def api_server(dsn: str) -> Iterator[tuple[str, dict[str, str]]]:
    """``pin-sessions serve`` on a free port; its base URL and the environment it reads."""
    with tempfile.TemporaryDirectory(prefix="pin-bench-api-") as data_dir:
        env = {
            **os.environ,
            "PIN_DATABASE_URL": dsn,
            "PIN_DATA_DIR": data_dir,
            "PIN_SECRET_KEY": "b" * 48,
            "PIN_DEV_CODES": "1",
        }
        port = free_port()
        server = subprocess.Popen(
            [sys.executable, "-m", "pin_sessions", "serve", "--port", str(port)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 60
            while not _ready(base):
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the API did not start")
                time.sleep(0.2)
            yield base, env
        finally:
            server.terminate()
            server.wait(timeout=30)


def _ready(base: str) -> bool:
    try:
        return httpx.get(f"{base}/readyz", timeout=1).status_code == 200
    except httpx.TransportError:
        return False


def viewer_token(base: str, env: dict[str, str]) -> str:
    """An operator grants dev-stats.view to a phone; its user signs in with a dev code."""
    phone = "+1555" + str(random.randrange(10**7)).zfill(7)
    subprocess.run(
        [sys.executable, "-m", "pin_sessions", "users", "grant", "--phone", phone,
         "--permission", "dev-stats.view"],
        env=env, check=True, capture_output=True,
    )  # fmt: skip
    with httpx.Client(base_url=base, timeout=10) as client:
        requested = client.post("/api/identity/sign-in/requests", json={"phoneNumber": phone})
        request_id = requested.raise_for_status().json()["requestId"]
        code = client.get(f"/dev/sign-in-codes/{request_id}").raise_for_status().json()["code"]
        confirmed = client.post(
            "/api/identity/sign-in/confirm", json={"requestId": request_id, "code": code}
        )
        token: str = confirmed.raise_for_status().json()["accessToken"]
    return token


def wrk(base: str, token: str, period: Period, connections: int, seconds: int) -> dict[str, Any]:
    url = f"{base}{SUMMARY_PATH}?from={period.first.isoformat()}&to={period.last.isoformat()}"
    command = [
        "wrk", "-t", "1", "-c", str(connections), "-d", f"{seconds}s", "--timeout", "10s",
        "-s", str(LUA_SCRIPT), "-H", f"Authorization: Bearer {token}", url,
    ]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"wrk failed: {result.stderr[-2000:]}")
    measured: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    if measured["non2xx"] or measured["socketErrors"]:
        raise RuntimeError(f"the API answered errors under load: {measured}")
    return {"connections": connections, **measured}


def through_api(dsn: str, period: Period, args: argparse.Namespace) -> list[dict[str, Any]]:
    with api_server(dsn) as (base, env):
        token = viewer_token(base, env)
        answer = httpx.get(
            f"{base}{SUMMARY_PATH}",
            params={"from": period.first.isoformat(), "to": period.last.isoformat()},
            headers={"Authorization": f"Bearer {token}"},
            timeout=30,
        )
        answer.raise_for_status()
        wrk(base, token, period, 1, 2)  # warm-up: the pool's connections and plans
        return [wrk(base, token, period, c, args.duration) for c in args.connections]


# --- the run -----------------------------------------------------------------------------


async def measure(dsn: str, period: Period, args: argparse.Namespace) -> dict[str, Any]:
    database = Database(dsn, max_size=2)
    await database.open()
    try:
        lengths = await on_connection(dsn, lambda conn: conn.fetchrow(SELECT_HISTOGRAM_LENGTHS))
        report: dict[str, Any] = {
            "histogramLength": {"mean": round(lengths["mean"], 1), "max": lengths["max"]},
            "baseline": await baseline(dsn, period, args.baseline_runs),
            "inProcess": await in_process(database, period, args.requests),
        }
        report["api"] = await asyncio.to_thread(through_api, dsn, period, args)
        report["accuracy"] = await accuracy(dsn, database, period.last)
        report["writes"] = await writes(database, args.write_facts, rounds=3)
        report["fullLengthHistograms"] = {
            "read": await full_length_histograms(database, period, args.requests),
            "writes": await writes(database, args.write_facts, rounds=3),
        }
    finally:
        await database.close()
    return report


async def run(dsn: str, args: argparse.Namespace) -> dict[str, Any]:
    name = f"bench_dev_stats_{uuid.uuid4().hex[:8]}"
    await on_connection(dsn, lambda conn: conn.execute(f'create database "{name}"'))
    target = urlunsplit(urlsplit(dsn)._replace(path=f"/{name}"))
    try:
        now = datetime.now(UTC)
        year = Period(now.date() - timedelta(days=MAX_PERIOD_DAYS - 1), now.date())
        seeded = await seed(target, args.facts, year.first, now)
        measured = await measure(target, year, args)
    finally:
        await on_connection(dsn, lambda conn: conn.execute(f'drop database "{name}" with (force)'))
    p99s = [run["p99Ms"] for run in measured["api"]]
    return {
        "facts": args.facts,
        "period": {"from": year.first.isoformat(), "to": year.last.isoformat(), "days": year.days},
        **seeded,
        **measured,
        "speedupInProcessP50": round(
            measured["baseline"]["p50Ms"] / measured["inProcess"]["p50Ms"], 1
        ),
        "targetsMet": {
            "apiP99Under100MsAtOneConnection": p99s[0] < 100,
            "percentileErrorWithinBound": max(
                measured["accuracy"]["p50MaxAbsRelativeError"],
                measured["accuracy"]["p90MaxAbsRelativeError"],
            )
            <= MAX_RELATIVE_ERROR,
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--facts", type=int, default=10_000_000)
    parser.add_argument("--requests", type=int, default=500, help="in-process summaries")
    parser.add_argument("--duration", type=int, default=20, help="seconds of each wrk run")
    parser.add_argument(
        "--connections",
        type=lambda raw: [int(c) for c in raw.split(",")],
        default=[1, 4],
        help="wrk connections, one run each; the first is the target's",
    )
    parser.add_argument("--baseline-runs", type=int, default=3)
    parser.add_argument("--write-facts", type=int, default=20_000, help="per write round")
    args = parser.parse_args(argv)
    if shutil.which("wrk") is None:
        print(WRK_MISSING, file=sys.stderr)
        return 2
    configure_logging("warning", stream=sys.stderr)
    with server_dsn() as dsn:
        report = asyncio.run(run(dsn, args))
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark ExpireSessionsJob against a plain set-based UPDATE, on identical data.

Seeds one source database (by default 1,000,000 expired Active refresh sessions and
100,000 expired Pending SICR among 1,000,000 live sessions), then measures each
scenario on its own copy made with ``CREATE DATABASE ... TEMPLATE``:

  (a) baseline: one plain UPDATE per phase;
  (b) the job in default mode (BatchSize above the backlog: one UPDATE per phase);
  (c) the job chunked at BatchSize (5000);
  (d) a job pass with nothing to expire, over the live rows (after (c), vacuumed): the
      cold first pass and the median of five warm ones.

Prints one JSON object: rows/s, ratio to the baseline, the longest chunk transaction in
ms and the no-op pass in ms, with the issue's targets. Uses ``PIN_DATABASE_URL`` (an
account that may create databases) when set, else a throwaway embedded PostgreSQL.

    python bench/expire_sessions.py            # the issue's sizes
    python bench/expire_sessions.py --small    # a quick run
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
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from pin_sessions.identity.jobs.expire_sessions import (
    ExpireSessionsResult,
    build_expire_sessions_job,
)
from pin_sessions.identity.sql import EXPIRE_REFRESH_SESSIONS, EXPIRE_SICR
from pin_sessions.platform.clock import FixedClock
from pin_sessions.platform.database import Database
from pin_sessions.platform.embedded import EmbeddedPostgres
from pin_sessions.platform.jobs import PollingWorker
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


async def admin(dsn: str, statement: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(statement)
    finally:
        await conn.close()


async def seed(dsn: str, now: datetime, args: argparse.Namespace) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await migrate(conn)
        user_id = uuid.uuid4()
        shuffled = args.layout == "shuffled"
        await conn.execute(SEED_USER, user_id, now)
        # Expired within the last 30 days; live for 1 to 31 more days.
        month = timedelta(days=30)
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
        await conn.execute(SEED_SICR, now, args.expired_sicr, shuffled)
        await conn.execute("vacuum analyze")
    finally:
        await conn.close()


async def baseline(dsn: str, now: datetime) -> float:
    conn = await asyncpg.connect(dsn)
    try:
        started = time.perf_counter()
        await conn.execute(EXPIRE_REFRESH_SESSIONS, now)
        await conn.execute(EXPIRE_SICR, now)
        elapsed: float = time.perf_counter() - started
        return elapsed
    finally:
        await conn.close()


async def job_pass(
    dsn: str, now: datetime, batch_size: int, *, vacuum_first: bool = False, passes: int = 1
) -> tuple[list[float], ExpireSessionsResult]:
    if vacuum_first:
        await admin(dsn, "vacuum analyze")
    database = Database(dsn, max_size=2)
    await database.open()
    try:
        registry = new_registry()
        options = ExpireSessionsSettings(batch_size=batch_size)
        job = build_expire_sessions_job(database, options, registry)
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


async def run(dsn: str, args: argparse.Namespace) -> dict[str, Any]:
    now = datetime.now(UTC)
    source = f"bench_src_{uuid.uuid4().hex[:8]}"
    await admin(dsn, f'create database "{source}"')
    expired: int = args.expired_refresh + args.expired_sicr
    try:
        started = time.perf_counter()
        await seed(with_database(dsn, source), now, args)
        seeded_s = time.perf_counter() - started

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
            noop = await job_pass(copy, now, args.batch_size, vacuum_first=True, passes=6)
            return chunked, noop

        (chunked_s, chunked), (noop_s, noop) = await on_copy("chunked", chunked_then_noop)
    finally:
        await admin(dsn, f'drop database if exists "{source}"')

    def rate(seconds: float) -> int:
        return round(expired / seconds)

    assert default.refresh.expired + default.sicr.expired == expired
    assert chunked.refresh.expired + chunked.sicr.expired == expired
    assert noop.refresh.expired + noop.sicr.expired == 0
    longest_chunk_ms = max(chunked.refresh.longest_statement_ms, chunked.sicr.longest_statement_ms)
    chunked_ratio = round(rate(chunked_s[0]) / rate(baseline_s), 3)
    # A polling worker's passes run on warm connections (statements already prepared);
    # only its very first pass is cold, so the target applies to the warm median.
    noop_warm_ms = round(sorted(noop_s[1:])[len(noop_s[1:]) // 2] * 1000, 2)
    return {
        "rows": {
            "expiredRefreshSessions": args.expired_refresh,
            "expiredSicr": args.expired_sicr,
            "liveRefreshSessions": args.live,
            "layout": args.layout,
        },
        "seedSeconds": round(seeded_s, 1),
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
            "chunks": chunked.refresh.chunks + chunked.sicr.chunks,
            "longestChunkTransactionMs": round(longest_chunk_ms, 1),
        },
        "noopPass": {
            "coldFirstPassMs": round(noop_s[0] * 1000, 2),
            "warmMedianMs": noop_warm_ms,
        },
        "targetsMet": {
            "chunkedAtLeast0.7xBaseline": chunked_ratio >= 0.7,
            "longestChunkUnder1000Ms": longest_chunk_ms < 1000,
            "noopPassUnder20Ms": noop_warm_ms < 20,
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--expired-refresh", type=int, default=1_000_000)
    parser.add_argument("--expired-sicr", type=int, default=100_000)
    parser.add_argument("--live", type=int, default=1_000_000)
    parser.add_argument("--batch-size", type=int, default=5000)
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
    configure_logging("warning", stream=sys.stderr)
    with admin_dsn() as dsn:
        report = asyncio.run(run(dsn, args))
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The heartbeat's storage under a sustained run (SPEC §11): sizes, dead tuples, vacuum, WAL, CPU.

    python bench/storage.py [--sessions 1000000] [--minutes 30] [--sample 60] [--settle 5]
                            [--window 5] [--period 60] [--batch 32] [--connections 4]
                            [--history 0] [--baseline]
    python bench/storage.py --cold [--sessions 1000000] [--cold-sample 1000] [--cold-rounds 3]
    python bench/storage.py --migration [--sessions 1000000] [--hold 5] [--lock-timeout 1]

**Sustained run** (the default). Seeds ``--sessions`` Active sessions with a real browser's
device columns (so rows have their production size), migrated as shipped, then makes each
device heartbeat once every ``--period`` seconds (60: 16,667 heartbeats/s at 1M) for
``--minutes`` minutes. The heartbeats are the service's own: each batch of ``--batch``
devices is ``user_activity.repository.extend_sessions``, the statement the API's group commit
sends, on ``--connections`` connections, paced to the rate (devices in a fixed shuffled
order, so each one's heartbeats are one period apart and neighbours on a page are not
rewritten together). The API is not in the loop: on this 2-core machine it answers at most
~5,500 heartbeats/s (BENCHMARKS.md), a third of the 1M regime; what is measured here is
what PostgreSQL does with the writes. Time is real: nothing is scaled, so a run shorter than
the issue's 30 minutes is that much less evidence, not a faster model of it. Every ``--sample``
seconds (60) it samples the heap's and every index's
size, live and dead tuples, autovacuum runs and time, the HOT share of updates and the share
whose new version left its page (``n_tup_newpage_upd``), WAL bytes and full-page images per
heartbeat, PostgreSQL's CPU per heartbeat (all its processes, exited backends and vacuum
workers included; the embedded server's only), the bench's own CPU, checkpoints, and the
machine's busy/idle/stolen shares (/proc/stat). The verdict (the issue's targets): every
relation at most 1.5 times its size at minute ``--settle``; dead tuples below three periods of
heartbeats at every sample after it; CPU and WAL per heartbeat of the last ``--window``
minutes within 15 % of the first ``--window`` minutes after ``--settle``; the rate held.
With ``--baseline`` the same run is first made as things were before SPEC §11's storage
settings: the table's parameters reset to PostgreSQL's defaults (fillfactor 100, the
server's autovacuum settings) and ``wal_compression`` off server-wide; then the tuned run
with the table as migrated and compression on (the method the server is set to, else the
best it knows). Both phases are in one report, on the same server, one after the other, so
the effect shows in one run; ``comparison`` puts their figures side by side. Needs a
superuser (ALTER SYSTEM), as ``--cold`` does.

**Cold pages** (``--cold``). The regime where a heartbeat is the first write to its pages
since the last checkpoint, so each one logs full-page images: rounds alternating
``wal_compression`` off and on (the method the server is set to, else the best it knows),
each round a checkpoint and then ``--cold-sample`` heartbeats of devices on distinct heap
pages. Reports WAL, full-page images and PostgreSQL CPU per heartbeat for each setting and
the ratio (target: compression at least halves the WAL). Needs a superuser (ALTER SYSTEM).

**Migrating a populated table** (``--migration``). Migrates a database to the version before
the storage migration, seeds ``--sessions``, and runs heartbeats at the sustained rate on
connections whose ``lock_timeout`` is ``--lock-timeout`` seconds; then applies the pending
migrations with ``migrate`` (timed), and runs the storage migration's statement once more in
a transaction held open for ``--hold`` seconds while the heartbeats go on, reading the locks
it holds from ``pg_locks``. Reports the migration's time, whether the table was rewritten
(its relfilenode), the locks, and the heartbeat batches in each window: none may fail on its
lock timeout, i.e. none waits for a lock longer than that bound.

PostgreSQL: ``PIN_DATABASE_URL`` (an account that may create databases) when set, else an
embedded server in a temporary directory. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
import re
import resource
import statistics
import sys
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import psutil
from serving import bench_database

from pin_sessions.platform.embedded import WAL_COMPRESSION_METHODS
from pin_sessions.platform.migrations import (
    CREATE_LEDGER,
    INSERT_APPLIED,
    Migration,
    available_migrations,
    migrate,
)
from pin_sessions.user_activity.repository import extend_sessions

STORAGE_MIGRATION = "sessions_storage"
# A browser's device columns, as the API stores them (the user agent is the row's bulk).
USER_AGENT = (
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/138.0.0.0 Safari/537.36"
)
# Device i's AnonymousId is md5('device-' || i): random-looking, and computable on both sides.
# Session ids are UUIDv7-shaped and increase with i, as the service's are with time. Each
# session's last activity is somewhere in the last period, as in service: with one value for
# all, ix_sessions_active_last_activity would start as a few deduplicated posting lists and
# its first minutes' growth would be its return to its natural size, not bloat.
SEED_ACTIVE = """
insert into user_activity.sessions
    (id, anonymous_id, status, created_at, last_activity_at,
     device_user_agent, device_type, device_os, device_browser, device_ip)
select (lpad(to_hex($3::bigint + i), 12, '0') || '7000' || '8' || lpad(to_hex(i), 15, '0'))::uuid,
       md5('device-' || i)::uuid, 'Active', now() - interval '20 minutes',
       now() - random() * $5::float8 * interval '1 second',
       $4, 'Desktop', 'Windows 10', 'Chrome 138', '203.0.113.' || (i % 256)
from generate_series($1::bigint, $2::bigint) as i
"""
# History: closed sessions of the same devices, older, never written again.
SEED_HISTORY = """
insert into user_activity.sessions
    (id, anonymous_id, status, created_at, last_activity_at, ended_at, duration,
     device_user_agent, device_type, device_os, device_browser, device_ip)
select (lpad(to_hex($3::bigint + i), 12, '0') || '7000' || '9' || lpad(to_hex(i), 15, '0'))::uuid,
       md5('device-' || (1 + i % $4))::uuid, 'Inactive',
       now() - interval '30 days', now() - interval '30 days' + interval '20 minutes',
       now() - interval '30 days' + interval '21 minutes', interval '20 minutes',
       $5, 'Desktop', 'Windows 10', 'Chrome 138', '203.0.113.' || (i % 256)
from generate_series($1::bigint, $2::bigint) as i
"""
SEED_STEP = 500_000
# A multiplier coprime with any table size below it: position p of a period is device
# 1 + (p * SHUFFLE) mod N, each device once per period, neighbours far apart.
SHUFFLE = 2_654_435_761

ROW_SHAPE = """
select c.relpages, c.reltuples::bigint as tuples,
       (select avg(pg_column_size(s.*)) from user_activity.sessions as s
        tablesample system (1)) as row_bytes,
       c.reloptions
from pg_class as c where c.oid = 'user_activity.sessions'::regclass
"""
RELATION_SIZES = """
select c.relname, pg_relation_size(c.oid) as bytes
from pg_class as c
where c.oid = 'user_activity.sessions'::regclass
   or c.oid in (select indexrelid from pg_index
                where indrelid = 'user_activity.sessions'::regclass)
order by c.relname
"""
# to_jsonb: the columns a version has (n_tup_newpage_upd from 16, total_autovacuum_time from 18).
TABLE_STATS = """
select to_jsonb(s) from pg_stat_user_tables as s
where s.relid = 'user_activity.sessions'::regclass
"""
WAL_STATS = """
select pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint as position,
       (select wal_fpi from pg_stat_wal) as fpi
"""
CHECKPOINTS = "select num_timed + num_requested from pg_stat_checkpointer"
CHECKPOINTS_BEFORE_17 = "select checkpoints_timed + checkpoints_req from pg_stat_bgwriter"
CPU_KINDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")

# The locks a transaction holds on the sessions table and its indexes.
LOCKS_ON_SESSIONS = """
select c.relname, l.mode, l.granted
from pg_locks as l join pg_class as c on c.oid = l.relation
where l.pid = $1
  and (c.oid = 'user_activity.sessions'::regclass
       or c.oid in (select indexrelid from pg_index
                    where indrelid = 'user_activity.sessions'::regclass))
order by c.relname, l.mode
"""
RELFILENODE = "select pg_relation_filenode('user_activity.sessions')"


def device_id(i: int) -> uuid.UUID:
    """Device ``i``'s AnonymousId, as the seed computes it."""
    return uuid.UUID(hashlib.md5(f"device-{i}".encode()).hexdigest())


def storage_migration() -> Migration:
    """The migration that sets the sessions table's storage parameters."""
    return next(m for m in available_migrations() if m.name == STORAGE_MIGRATION)


def storage_parameters() -> list[str]:
    """The parameter names the storage migration sets (what ``--baseline`` resets)."""
    body = storage_migration().sql.split(" set (", 1)[1].split(");", 1)[0]
    return re.findall(r"^\s*(\w+)\s*=", body, flags=re.MULTILINE)


def with_database(dsn: str, database: str) -> str:
    return urlunsplit(urlsplit(dsn)._replace(path=f"/{database}"))


# --- the server's and the machine's CPU ----------------------------------------------


@dataclass
class Server:
    dsn: str
    # The server's postmaster when it runs on this machine (its processes' CPU), else None.
    postmaster_pid: int | None

    def cpu_seconds(self) -> float:
        """PostgreSQL's CPU time so far: the postmaster, its live children and those it
        reaped (exited backends, finished vacuum workers); 0 when it runs elsewhere."""
        if self.postmaster_pid is None:
            return 0.0
        root = psutil.Process(self.postmaster_pid)
        own = root.cpu_times()
        total: float = own.user + own.system + own.children_user + own.children_system
        for process in root.children(recursive=True):
            with contextlib.suppress(psutil.NoSuchProcess):
                times = process.cpu_times()
                total += times.user + times.system
        return total


async def local_postmaster(dsn: str) -> int | None:
    """With ``PIN_DATABASE_URL``: the postmaster of the server, when it is on this machine
    (the parent of this connection's backend), so its CPU is measured and no other's."""
    conn = await asyncpg.connect(dsn)
    try:
        backend = await conn.fetchval("select pg_backend_pid()")
    finally:
        await conn.close()
    with contextlib.suppress(psutil.Error):
        parent = psutil.Process(backend).parent()
        if parent is not None and parent.name() in ("postgres", "postmaster"):
            return parent.pid
    return None


def machine_cpu() -> list[int]:
    """The machine's CPU time so far by kind (/proc/stat's first line, in clock ticks)."""
    with open("/proc/stat") as stat:
        return [int(ticks) for ticks in stat.readline().split()[1:9]]


def cpu_shares(before: list[int], after: list[int]) -> dict[str, float]:
    """How the cores' time went between two readings: busy, idle, or stolen."""
    spent = dict(zip(CPU_KINDS, (b - a for a, b in zip(before, after, strict=True)), strict=True))
    total = max(sum(spent.values()), 1)
    busy = spent["user"] + spent["nice"] + spent["system"] + spent["irq"] + spent["softirq"]
    return {
        "busy": round(busy / total, 3),
        "idle": round((spent["idle"] + spent["iowait"]) / total, 3),
        "steal": round(spent["steal"] / total, 3),
    }


def own_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


# --- seeding -------------------------------------------------------------------------


async def migrate_up_to(conn: asyncpg.Connection[Any], before: int) -> None:
    """Apply the migrations below version ``before``, as ``migrate`` would."""
    await conn.execute(CREATE_LEDGER)
    for migration in available_migrations():
        if migration.version < before:
            async with conn.transaction():
                await conn.execute(migration.sql)
                await conn.execute(INSERT_APPLIED, migration.version, migration.name)


async def seed(
    conn: asyncpg.Connection[Any], sessions: int, history: int, period: float = 60.0
) -> dict[str, Any]:
    """The Active sessions, then the history; vacuumed, analysed and checkpointed as a table
    in service would be. The Active rows go first so that they lie together on their own
    pages, as the newest sessions of a table in service do: inserted after the history, the
    free space map would put many of them one by one into the history's pages (a history
    row is larger, so its pages' last gaps still take an Active row), and the first minute
    after a checkpoint would pay a full-page image for each of those pages."""
    started = time.perf_counter()
    now_ms = int(time.time() * 1000)
    for first in range(1, sessions + 1, SEED_STEP):
        last = min(first + SEED_STEP - 1, sessions)
        await conn.execute(SEED_ACTIVE, first, last, now_ms, USER_AGENT, period)
    for first in range(0, history, SEED_STEP):
        last = min(first + SEED_STEP, history) - 1
        await conn.execute(SEED_HISTORY, first, last, now_ms - 10**10, sessions, USER_AGENT)
    await conn.execute("vacuum analyze user_activity.sessions")
    await conn.execute("checkpoint")
    shape = await conn.fetchrow(ROW_SHAPE)
    assert shape is not None
    return {
        "activeSessions": sessions,
        "historySessions": history,
        "seconds": round(time.perf_counter() - started, 1),
        "heapPages": shape["relpages"],
        "rowsPerPage": round(shape["tuples"] / max(shape["relpages"], 1), 1),
        "rowBytes": round(float(shape["row_bytes"] or 0)),
        "tableParameters": shape["reloptions"] or [],
    }


# --- heartbeats ----------------------------------------------------------------------


@dataclass
class Batch:
    at: float
    seconds: float
    failed: str | None = None


@dataclass
class Heartbeats:
    """Every device once a period, in batches of the service's own heartbeat statement."""

    dsn: str
    sessions: int
    period: float
    batch: int
    connections: int
    lock_timeout: float = 0
    keep_batches: bool = False
    done: int = 0
    left_out: int = 0
    failed: int = 0
    max_lag: float = 0.0
    batches: list[Batch] = field(default_factory=list)
    _next: int = 0
    _t0: float = 0.0

    @property
    def rate(self) -> float:
        return self.sessions / self.period

    def devices(self, k: int) -> dict[uuid.UUID, datetime]:
        now = datetime.now(UTC)
        first = k * self.batch
        return {
            device_id(1 + (position * SHUFFLE) % self.sessions): now
            for position in range(first, first + self.batch)
        }

    async def run(self, stop: asyncio.Event) -> None:
        settings = {"lock_timeout": f"{int(self.lock_timeout * 1000)}ms"}
        conns = [
            await asyncpg.connect(self.dsn, server_settings=settings)
            for _ in range(self.connections)
        ]
        self._t0 = time.monotonic()
        try:
            await asyncio.gather(*(self._loop(conn, stop) for conn in conns))
        finally:
            for conn in conns:
                await conn.close()

    async def _loop(self, conn: asyncpg.Connection[Any], stop: asyncio.Event) -> None:
        while not stop.is_set():
            k = self._next
            self._next += 1
            due = self._t0 + k * self.batch / self.rate
            delay = due - time.monotonic()
            if delay > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), delay)
                if stop.is_set():
                    return
            else:
                self.max_lag = max(self.max_lag, -delay)
            activity = self.devices(k)
            started = time.monotonic()
            failed = None
            try:
                extended, locked = await extend_sessions(conn, activity)
            except (asyncpg.LockNotAvailableError, asyncpg.DeadlockDetectedError) as exc:
                failed = type(exc).__name__
                self.failed += len(activity)
            else:
                self.done += len(extended)
                self.left_out += len(activity) - len(extended) - len(locked)
            if self.keep_batches:
                self.batches.append(Batch(started, time.monotonic() - started, failed))


# --- WAL compression ------------------------------------------------------------------

SHOW_COMPRESSION = "select setting, enumvals from pg_settings where name = 'wal_compression'"


async def set_compression(conn: asyncpg.Connection[Any], value: str) -> None:
    """Server-wide (so vacuum and the checkpointer agree), then seen by this connection."""
    if await conn.fetchval("show wal_compression") == value:
        return
    await conn.execute(f"alter system set wal_compression = '{value}'")
    await conn.execute("select pg_reload_conf()")
    deadline = time.monotonic() + 30
    while await conn.fetchval("show wal_compression") != value:
        if time.monotonic() > deadline:
            raise RuntimeError(f"wal_compression did not become {value}")
        await asyncio.sleep(0.05)


async def compression_methods(conn: asyncpg.Connection[Any]) -> tuple[str, str, list[str]]:
    """The server's setting now, the method to compare (the one it is set to, else the best
    it knows), and every method it knows, best first."""
    row = await conn.fetchrow(SHOW_COMPRESSION)
    assert row is not None
    known = [m for m in WAL_COMPRESSION_METHODS if m in row["enumvals"]]
    setting: str = row["setting"]
    return setting, setting if setting not in ("off", "on") else known[0], known


# --- the sustained run ---------------------------------------------------------------


@dataclass
class Reading:
    at: float
    heartbeats: int
    sizes: dict[str, int]
    table: dict[str, Any]
    wal: int
    fpi: int
    checkpoints: int
    postgres_cpu: float
    own_cpu: float
    machine: list[int]


async def read(conn: asyncpg.Connection[Any], server: Server, heartbeats: Heartbeats) -> Reading:
    sizes = {row["relname"]: row["bytes"] for row in await conn.fetch(RELATION_SIZES)}
    table = json.loads(await conn.fetchval(TABLE_STATS))
    wal = await conn.fetchrow(WAL_STATS)
    assert wal is not None
    try:
        checkpoints = await conn.fetchval(CHECKPOINTS)
    except asyncpg.UndefinedTableError:
        checkpoints = await conn.fetchval(CHECKPOINTS_BEFORE_17)
    return Reading(
        time.monotonic(), heartbeats.done, sizes, table, wal["position"], wal["fpi"],
        checkpoints, server.cpu_seconds(), own_cpu_seconds(), machine_cpu(),
    )  # fmt: skip


def sample(at_minute: float, before: Reading, after: Reading) -> dict[str, Any]:
    """One sample: the state at its end, and the rates since the previous one."""
    done = max(after.heartbeats - before.heartbeats, 1)
    t0, t1 = before.table, after.table

    def delta(name: str) -> float:
        return float(t1.get(name) or 0) - float(t0.get(name) or 0)

    updates = max(delta("n_tup_upd"), 1)
    sample: dict[str, Any] = {
        "minute": round(at_minute, 2),
        "heartbeatsPerSecond": round(done / (after.at - before.at)),
        "bytes": after.sizes,
        "liveTuples": t1["n_live_tup"],
        "deadTuples": t1["n_dead_tup"],
        "autovacuumRuns": int(delta("autovacuum_count")),
        "hotShare": round(delta("n_tup_hot_upd") / updates, 4),
        "walBytesPerHeartbeat": round((after.wal - before.wal) / done),
        "fpiPerHeartbeat": round((after.fpi - before.fpi) / done, 3),
        "postgresCpuUsPerHeartbeat": round((after.postgres_cpu - before.postgres_cpu) / done * 1e6),
        "benchCpuUsPerHeartbeat": round((after.own_cpu - before.own_cpu) / done * 1e6),
        "checkpoints": after.checkpoints - before.checkpoints,
        "machineCpu": cpu_shares(before.machine, after.machine),
    }  # fmt: skip
    if "n_tup_newpage_upd" in t1:
        sample["newPageShare"] = round(delta("n_tup_newpage_upd") / updates, 4)
    if "total_autovacuum_time" in t1:
        sample["autovacuumSeconds"] = round(delta("total_autovacuum_time") / 1000, 1)
    return sample


def verdict(samples: list[dict[str, Any]], args: argparse.Namespace, rate: float) -> dict[str, Any]:
    """The issue's targets over the minutes after ``--settle``."""
    after = [s for s in samples if s["minute"] >= args.settle]
    if len(after) < 2:
        return {"measured": False, "why": "the run ends before minute --settle + 1"}
    base, last = after[0]["bytes"], after[-1]["bytes"]
    growth = {name: round(last[name] / max(base[name], 1), 3) for name in base}
    first_window = [s for s in after[1:] if s["minute"] <= args.settle + args.window]
    last_window = [s for s in after[1:] if s["minute"] > after[-1]["minute"] - args.window]

    def drift(key: str) -> float:
        early: float = statistics.mean(s[key] for s in first_window)
        late: float = statistics.mean(s[key] for s in last_window)
        return round(late / early - 1, 3)

    dead_bound = 3 * args.sessions
    held = min(s["heartbeatsPerSecond"] for s in after) / rate
    return {
        "measured": True,
        "sizeAtEndOverSizeAtSettle": growth,
        "sizesWithin1.5x": all(g <= 1.5 for g in growth.values()),
        "maxDeadTuples": max(s["deadTuples"] for s in after),
        "deadTuplesBelow3Periods": all(s["deadTuples"] < dead_bound for s in after),
        "cpuPerHeartbeatDrift": drift("postgresCpuUsPerHeartbeat"),
        "walPerHeartbeatDrift": drift("walBytesPerHeartbeat"),
        "cpuFlatWithin15%": abs(drift("postgresCpuUsPerHeartbeat")) <= 0.15,
        "walFlatWithin15%": abs(drift("walBytesPerHeartbeat")) <= 0.15,
        "slowestMinuteShareOfRate": round(held, 3),
        "rateHeld": held >= 0.98,
    }


# Per-heartbeat figures of a sample, averaged over samples weighted by their heartbeats.
PER_HEARTBEAT = (
    "hotShare", "newPageShare", "walBytesPerHeartbeat", "fpiPerHeartbeat",
    "postgresCpuUsPerHeartbeat",
)  # fmt: skip


def summary(samples: list[dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    """The phase in a few figures: over the whole run, and over the samples after
    ``--settle`` (the first minutes follow the seed's checkpoint: every page is cold)."""

    def over(part: list[dict[str, Any]]) -> dict[str, Any]:
        if not part:
            return {}
        weights = [s["heartbeatsPerSecond"] for s in part]
        total = max(sum(weights), 1)
        figures: dict[str, Any] = {
            "fromMinute": round(part[0]["minute"] - args.sample / 60, 2),
            "toMinute": part[-1]["minute"],
            "heartbeatsPerSecond": round(total / len(part)),
        }
        for key in PER_HEARTBEAT:
            if key in part[0]:
                mean = sum(s[key] * w for s, w in zip(part, weights, strict=True)) / total
                figures[key] = round(mean, 4 if key.endswith("Share") else 3 if "fpi" in key else 1)
        figures["maxDeadTuples"] = max(s["deadTuples"] for s in part)
        figures["autovacuumRuns"] = sum(s["autovacuumRuns"] for s in part)
        if "autovacuumSeconds" in part[0]:
            figures["autovacuumSeconds"] = round(sum(s["autovacuumSeconds"] for s in part), 1)
        figures["checkpoints"] = sum(s["checkpoints"] for s in part)
        figures["megabytesAtEnd"] = {
            name: round(size / 2**20, 1) for name, size in part[-1]["bytes"].items()
        }
        return figures

    return {
        "wholeRun": over(samples),
        "afterSettle": over([s for s in samples if s["minute"] > args.settle]),
    }


def comparison(baseline: dict[str, Any], tuned: dict[str, Any]) -> dict[str, Any]:
    """The two phases' summaries side by side, figure by figure."""
    side_by_side: dict[str, Any] = {}
    for part in ("wholeRun", "afterSettle"):
        before, after = baseline["summary"][part], tuned["summary"][part]
        side_by_side[part] = {
            key: {"baseline": before[key], "tuned": after.get(key)}
            for key in before
            if key not in ("fromMinute", "toMinute")
        }
    return side_by_side


async def sustained_phases(server: Server, args: argparse.Namespace) -> dict[str, Any]:
    """The baseline (with ``--baseline``), then the tuned run; the server's own WAL
    compression setting is put back afterwards."""
    conn = await asyncpg.connect(server.dsn)
    try:
        original, method, _ = await compression_methods(conn)
    finally:
        await conn.close()
    report: dict[str, Any] = {}
    try:
        if args.baseline:
            report["baseline"] = await phase(server, args, tuned=False, compression="off")
        report["tuned"] = await phase(server, args, tuned=True, compression=method)
    finally:
        conn = await asyncpg.connect(server.dsn)
        try:
            await set_compression(conn, original)
        finally:
            await conn.close()
    if args.baseline:
        report["comparison"] = comparison(report["baseline"], report["tuned"])
    return report


async def sustained(server: Server, dsn: str, args: argparse.Namespace) -> dict[str, Any]:
    heartbeats = Heartbeats(dsn, args.sessions, args.period, args.batch, args.connections)
    stop = asyncio.Event()
    conn = await asyncpg.connect(dsn)
    try:
        readings = [await read(conn, server, heartbeats)]
        driving = asyncio.create_task(heartbeats.run(stop))
        samples = []
        for number in range(1, int(args.minutes * 60 / args.sample) + 1):
            due = readings[0].at + args.sample * number
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            if driving.done():
                driving.result()  # raises what stopped it
            readings.append(await read(conn, server, heartbeats))
            samples.append(sample(number * args.sample / 60, readings[-2], readings[-1]))
            print(json.dumps(samples[-1]), file=sys.stderr, flush=True)
        stop.set()
        await driving
    finally:
        stop.set()
        await conn.close()
    return {
        "targetPerSecond": round(heartbeats.rate, 1),
        "heartbeats": heartbeats.done,
        "devicesWithoutActiveSession": heartbeats.left_out,
        "maxLagSeconds": round(heartbeats.max_lag, 3),
        "samples": samples,
        "summary": summary(samples, args),
        "verdict": verdict(samples, args, heartbeats.rate),
    }


async def phase(
    server: Server, args: argparse.Namespace, *, tuned: bool, compression: str
) -> dict[str, Any]:
    """One sustained run on a database of its own: the storage parameters as shipped, or
    reset to PostgreSQL's defaults (the baseline), with ``compression`` server-wide."""
    name = "pin_storage_tuned" if tuned else "pin_storage_baseline"
    admin = await asyncpg.connect(server.dsn)
    try:
        await admin.execute(f'drop database if exists "{name}" with (force)')
        await admin.execute(f'create database "{name}"')
        await set_compression(admin, compression)
    finally:
        await admin.close()
    dsn = with_database(server.dsn, name)
    try:
        conn = await asyncpg.connect(dsn)
        try:
            await migrate(conn)
            if not tuned:
                await conn.execute(
                    f"alter table user_activity.sessions reset ({', '.join(storage_parameters())})"
                )
            seeded = await seed(conn, args.sessions, args.history, args.period)
        finally:
            await conn.close()
        print(json.dumps({"phase": name, "seed": seeded}), file=sys.stderr, flush=True)
        return {"walCompression": compression, "seed": seeded, **await sustained(server, dsn, args)}
    finally:
        admin = await asyncpg.connect(server.dsn)
        try:
            await admin.execute(f'drop database if exists "{name}" with (force)')
        finally:
            await admin.close()


# --- cold pages ----------------------------------------------------------------------

# One device per heap page, in random order: each heartbeat of a round is the first write
# to its heap page since the round's checkpoint (its index leaves mostly too, when the
# sample is small against the indexes' leaf pages).
ONE_DEVICE_PER_PAGE = """
select anonymous_id from (
    select distinct on ((ctid::text::point)[0]) anonymous_id
    from user_activity.sessions where status = 'Active'
    order by (ctid::text::point)[0], random()
) as one_per_page
order by random()
limit $1
"""


async def cold(server: Server, args: argparse.Namespace) -> dict[str, Any]:
    """``--cold-rounds`` cycles through ``off`` and every method the server knows."""
    conn = await asyncpg.connect(server.dsn)
    try:
        await migrate(conn)
        seeded = await seed(conn, args.sessions, args.history)
        # The method the server is set to (the embedded one's), else the best it knows.
        original, chosen, known = await compression_methods(conn)
        settings = ["off", *known]
        devices = [r[0] for r in await conn.fetch(ONE_DEVICE_PER_PAGE, args.cold_sample)]
        rounds: dict[str, list[dict[str, float]]] = {setting: [] for setting in settings}
        try:
            for _ in range(args.cold_rounds):
                for setting in settings:
                    await set_compression(conn, setting)
                    await conn.execute("checkpoint")
                    rounds[setting].append(await cold_round(conn, server, devices, args.batch))
        finally:
            await set_compression(conn, original)
    finally:
        await conn.close()
    medians = {
        setting: {key: round(statistics.median(r[key] for r in runs), 2) for key in runs[0]}
        for setting, runs in rounds.items()
    }
    off = medians["off"]["walBytesPerHeartbeat"]
    ratios = {m: round(off / max(medians[m]["walBytesPerHeartbeat"], 1), 2) for m in settings[1:]}
    return {
        "seed": seeded,
        "serverSetting": original,
        "heartbeatsPerRound": len(devices),
        "rounds": rounds,
        "medians": medians,
        "walOffOverMethod": ratios,
        "verdict": {"method": chosen, "atLeastHalved": ratios[chosen] >= 2},
    }


async def cold_round(
    conn: asyncpg.Connection[Any], server: Server, devices: list[uuid.UUID], batch: int
) -> dict[str, float]:
    """The devices' heartbeats in batches, right after a checkpoint: WAL, images, CPU."""
    before = await conn.fetchrow(WAL_STATS)
    cpu = server.cpu_seconds()
    done = 0
    for first in range(0, len(devices), batch):
        now = datetime.now(UTC)
        extended, _ = await extend_sessions(
            conn, dict.fromkeys(devices[first : first + batch], now)
        )
        done += len(extended)
    cpu = server.cpu_seconds() - cpu
    # This backend's WAL counters reach pg_stat_wal when it next goes idle.
    await conn.execute("select pg_stat_force_next_flush()")
    await conn.execute("select 1")
    after = await conn.fetchrow(WAL_STATS)
    assert before is not None and after is not None
    return {
        "walBytesPerHeartbeat": round((after["position"] - before["position"]) / done, 1),
        "fpiPerHeartbeat": round((after["fpi"] - before["fpi"]) / done, 3),
        "postgresCpuUsPerHeartbeat": round(cpu / done * 1e6, 1),
    }


# --- migrating a populated table -----------------------------------------------------


def window(batches: list[Batch], start: float, end: float) -> dict[str, Any]:
    """The heartbeat batches that were in flight during [start, end]."""
    inside = [b for b in batches if b.at <= end and b.at + b.seconds >= start]
    seconds = sorted(b.seconds for b in inside)
    return {
        "batches": len(inside),
        "failed": sum(1 for b in inside if b.failed),
        "failures": sorted({b.failed for b in inside if b.failed}),
        "p50Ms": round(statistics.median(seconds) * 1000, 1) if seconds else None,
        "maxMs": round(seconds[-1] * 1000, 1) if seconds else None,
    }


async def migration(server: Server, args: argparse.Namespace) -> dict[str, Any]:
    target = storage_migration()
    conn = await asyncpg.connect(server.dsn)
    try:
        await migrate_up_to(conn, target.version)
        seeded = await seed(conn, args.sessions, args.history)
        filenode = await conn.fetchval(RELFILENODE)
        heartbeats = Heartbeats(
            server.dsn, args.sessions, args.period, args.batch, args.connections,
            lock_timeout=args.lock_timeout, keep_batches=True,
        )  # fmt: skip
        stop = asyncio.Event()
        driving = asyncio.create_task(heartbeats.run(stop))
        await asyncio.sleep(args.hold)
        started = time.monotonic()
        applied = await migrate(conn)
        migrated = time.monotonic()
        await asyncio.sleep(args.hold)
        # The same statement held open: whatever it locks, heartbeats meet for this long.
        async with conn.transaction():
            await conn.execute(target.sql)
            hold_started = time.monotonic()
            locks = [dict(r) for r in await conn.fetch(LOCKS_ON_SESSIONS, conn.get_server_pid())]
            await asyncio.sleep(args.hold)
        held = time.monotonic()
        await asyncio.sleep(args.hold)
        stop.set()
        await driving
        after = await conn.fetchrow(ROW_SHAPE)
        assert after is not None
        unchanged = filenode == await conn.fetchval(RELFILENODE)
    finally:
        await conn.close()
    during = window(heartbeats.batches, started, migrated)
    holding = window(heartbeats.batches, hold_started, held)
    outside = [
        b for b in heartbeats.batches
        if not (started <= b.at <= migrated or hold_started <= b.at <= held)
    ]  # fmt: skip
    return {
        "seed": seeded,
        "applied": applied,
        "migrationSeconds": round(migrated - started, 3),
        "tableRewritten": not unchanged,
        "tableParametersAfter": after["reloptions"],
        "locksOfTheMigrationStatement": locks,
        "lockTimeoutSeconds": args.lock_timeout,
        "heartbeatsPerSecondTarget": round(heartbeats.rate, 1),
        "heartbeats": heartbeats.done,
        "duringMigration": during,
        "duringHeldMigrationTransaction": {"seconds": args.hold, **holding},
        "otherwise": window(outside, 0, float("inf")),
        "verdict": {
            "noRewrite": unchanged,
            "noHeartbeatBlockedPastLockTimeout": during["failed"] == 0 and holding["failed"] == 0,
            "onlyShareUpdateExclusive": {lock["mode"] for lock in locks}
            <= {"ShareUpdateExclusiveLock", "AccessShareLock"},
        },
    }


# --- orchestration -------------------------------------------------------------------


async def run(args: argparse.Namespace) -> dict[str, Any]:
    report: dict[str, Any] = {
        "benchmark": "storage",
        "mode": "cold" if args.cold else "migration" if args.migration else "sustained",
        "sessions": args.sessions,
        "history": args.history,
        "batch": args.batch,
        "connections": args.connections,
        "cpus": os.cpu_count(),
        "loadAverageAtStart": [round(value, 2) for value in os.getloadavg()],
    }
    started = machine_cpu()
    with bench_database() as (dsn, postmaster):
        server = Server(dsn, postmaster or await local_postmaster(dsn))
        report["postgresCpuMeasured"] = server.postmaster_pid is not None
        if args.cold:
            report["cold"] = await cold(server, args)
        elif args.migration:
            report["migration"] = await migration(server, args)
        else:
            report.update({"periodSeconds": args.period, "minutes": args.minutes,
                           "sampleSeconds": args.sample})  # fmt: skip
            report.update(await sustained_phases(server, args))
    report["machineCpu"] = cpu_shares(started, machine_cpu())
    report["loadAverageAtEnd"] = [round(value, 2) for value in os.getloadavg()]
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=1_000_000, help="Active sessions")
    parser.add_argument("--history", type=int, default=0, help="Inactive sessions besides")
    parser.add_argument("--period", type=float, default=60.0, help="seconds between a device's")
    parser.add_argument("--minutes", type=float, default=30.0, help="of each sustained phase")
    parser.add_argument("--sample", type=float, default=60.0, help="seconds between samples")
    parser.add_argument("--settle", type=float, default=5, help="minute sizes are judged from")
    parser.add_argument("--window", type=float, default=5, help="minutes compared for flatness")
    parser.add_argument("--batch", type=int, default=32, help="devices per heartbeat statement")
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--baseline", action="store_true", help="first without the parameters")
    parser.add_argument("--cold", action="store_true", help="WAL compression on cold pages")
    parser.add_argument("--cold-sample", type=int, default=1000, help="heartbeats per round")
    parser.add_argument("--cold-rounds", type=int, default=3, help="of each setting")
    parser.add_argument("--migration", action="store_true", help="migrate a populated table")
    parser.add_argument("--hold", type=float, default=5.0, help="seconds of each window")
    parser.add_argument("--lock-timeout", type=float, default=1.0, help="heartbeats', seconds")
    args = parser.parse_args()
    from pin_sessions.platform.logging import configure_logging

    # Stdout carries the report alone; each minute's sample goes to stderr as it comes.
    configure_logging("warning", stream=sys.stderr)
    print(json.dumps(asyncio.run(run(args)), indent=2))


if __name__ == "__main__":
    main()

"""Heartbeat benchmark: the real API against a bare app doing one UPDATE per request, under wrk.

    python bench/heartbeat.py [--sessions 100000] [--duration 8] [--rounds 2]
                              [--connections 64] [--paced-connections 256]
                              [--threads 2] [--workers 1]
                              [--rate 3000] [--sweep 100000,1000000,10000000]
                              [--profile heartbeat.stacks] [--hold-row 9]
                              [--compare-src DIR]

Load comes from wrk (Debian package ``wrk``), a native load generator, so the servers'
Python is not also paying for the client's. Seeds ``--sessions`` Active sessions (device
``i`` has the AnonymousId ``00000000-0000-4000-8000-<i in hex>``, which
``bench/heartbeat.lua`` computes too). Serves the API exactly as production does —
``pin-sessions serve --workers N`` — and the baseline, a bare ASGI app running the
heartbeat's single conditional ``UPDATE`` per request through asyncpg, under the same
uvicorn with as many worker processes (``--workers``). Drives each with wrk's closed loop
(``--threads``, ``--connections``, ``--duration`` seconds), alternating A B A B for
``--rounds`` rounds so a noisy neighbour hits both. Then, at each table size of
``--sweep``, ``--rounds`` rounds of the API's closed loop and of a fixed ``--rate`` per
second (paced by the wrk script, latency counted from each request's scheduled time, over
``--paced-connections``: a connection waits for its answer before its next request, so
too few would cap the rate — at 3,000/s, 64 connections would allow 21 ms per request
before the schedule slipped — while real devices do not queue behind each other),
alternating, reported as medians. The sweep grows one table, so a size is measured after
the smaller ones on the same database.

Besides requests per second it reports CPU per heartbeat — the server's processes' and
PostgreSQL's (user + system time over the run, from psutil), so a gain that only moves
work into the database shows — the write-ahead log written per request, and, with one
worker, the heartbeat batches of the run (``user_activity_heartbeat_batch_size`` from the
API's /metrics), and the machine's CPU over each run: the load generator's own CPU per
request, and the shares of the two cores that were busy, idle, or stolen by the
hypervisor (from /proc/stat). With ``--profile FILE``, one more closed loop of the API
runs with py-spy sampling its (first) worker: the stacks go to FILE and the functions
holding the most samples into the report. Prints one JSON object.

With ``--hold-row SECONDS`` the bench measures isolation instead (SPEC §11): one more device
is seeded, and another transaction holds its session row (``select … for update``) for
that long while a client sends that device's heartbeats one after another and wrk sends
every other device's at the fixed ``--rate``. Each round runs the same paced load once
without the held row and once with it (wrk's window lies inside the hold), and the report
gives both runs' medians and the locked device's answers: the other devices' p99 should
not move, the locked device waits for its row alone, bounded by the statement timeout.

With ``--compare-src DIR`` the bench compares two builds of the API instead: the variant,
the tree ``DIR`` (its ``src`` first on ``PYTHONPATH``), and this tree, alternating the
variant first in each pair — ``--rounds`` closed loops each (A B A B …), then, with a
``--rate``, as many paced runs — and reports each one's medians and the variant's server
CPU per heartbeat as a multiple of this tree's: the figure that holds on a loaded machine.

PostgreSQL: ``PIN_DATABASE_URL`` when set (its PostgreSQL processes must run on this
machine for the CPU figures), else an embedded server in a temporary directory.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import psutil
from serving import bench_database, free_port, running_server

from pin_sessions.platform.migrations import migrate

PATH = "/api/user-activity/sessions/heartbeat"
BENCH_DIR = Path(__file__).parent
LUA_SCRIPT = BENCH_DIR / "heartbeat.lua"
BATCH_METRIC = "user_activity_heartbeat_batch_size"
WARMUP_SECONDS = 2

# Device i's AnonymousId, as bench/heartbeat.lua computes it.
SEED_SESSIONS = """
insert into user_activity.sessions
    (id, anonymous_id, status, created_at, last_activity_at, device_user_agent, device_type)
select gen_random_uuid(),
       ('00000000-0000-4000-8000-' || lpad(to_hex(i), 12, '0'))::uuid,
       'Active', now(), now(), 'bench', 'Desktop'
from generate_series($1::bigint, $2::bigint) as i
"""

# The baseline's one UPDATE per request: the heartbeat as it was before group commit.
ONE_HEARTBEAT = """
update user_activity.sessions
set last_activity_at = greatest(last_activity_at, $2)
where anonymous_id = $1 and status = 'Active'
returning id, anonymous_id, user_id, linked_at, status, created_at, last_activity_at
"""

WAL_POSITION = "select pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint"
# /proc/stat's first columns: the cores' time by kind since boot.
CPU_KINDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
PROFILE_TOP = 25
# Where a heartbeat's samples go: each sample counts for the first part that one of its
# stack's functions names, or that its leaf frame (the function running) matches; the
# rest are "other" (other threads, coroutine stacks py-spy sees only in part).
PROFILE_PARTS = (
    ("group-committed batch", ("GroupCommit._flush_while_waiting",), ()),
    ("uvicorn writing the answer", ("RequestResponseCycle.send",), ()),
    ("request reader's task", ("RequestReader._read", "RequestReader.start"), ()),
    ("uvicorn reading, parsing, starting tasks", ("HttpToolsProtocol.",), ()),
    ("heartbeat handler", ("heartbeat (http.py)",), ()),
    ("FastAPI's and Starlette's layers", (), ("fastapi/", "starlette/applications.py",
                                             "starlette/middleware/errors.py")),
    ("request context and dispatch", ("RequestContextMiddleware", "(fast_path.py)"), ()),
    ("event loop", (), ("Runner.run (",)),
)  # fmt: skip

WRK_MISSING = (
    "bench/heartbeat.py drives its load with wrk, a native HTTP load generator, so that the "
    "client's CPU does not hide the servers' cost; install it (Debian/Ubuntu: "
    "`apt-get install wrk`) and run again."
)


# --- servers ---------------------------------------------------------------------------

# The baseline as uvicorn imports it (``--factory``), in each of its worker processes.
BASELINE_FACTORY = "heartbeat:baseline_app"
BASELINE_DSN_VARIABLE = "PIN_BENCH_BASELINE_DSN"


def api_command(port: int, workers: int) -> list[str]:
    """The API exactly as production runs it: ``pin-sessions serve``."""
    return [
        sys.executable, "-m", "pin_sessions", "serve",
        "--port", str(port), "--workers", str(workers),
    ]  # fmt: skip


def baseline_command(port: int, workers: int) -> list[str]:
    """The bare app under the same uvicorn, with as many worker processes."""
    return [
        sys.executable, "-m", "uvicorn", BASELINE_FACTORY, "--factory",
        "--host", "127.0.0.1", "--port", str(port), "--workers", str(workers),
        "--no-access-log", "--log-level", "warning",
    ]  # fmt: skip


def baseline_app() -> Any:
    """A bare ASGI app: parse the header, run the one UPDATE, answer JSON."""
    dsn = os.environ[BASELINE_DSN_VARIABLE]
    pool: asyncpg.Pool[asyncpg.Record] | None = None

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        nonlocal pool
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=10)
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    if pool is not None:
                        await pool.close()
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        assert pool is not None
        headers = dict(scope["headers"])
        if scope["path"] != PATH:
            await _respond(send, 200, b'{"status":"ok"}')
            return
        anonymous_id = uuid.UUID(headers[b"x-anonymous-id"].decode())
        row = await pool.fetchrow(ONE_HEARTBEAT, anonymous_id, datetime.now(UTC))
        assert row is not None
        body = json.dumps(
            {
                "sessionId": str(row["id"]),
                "lastActivityAt": row["last_activity_at"].isoformat(),
                "restarted": False,
            }
        ).encode()
        await _respond(send, 200, body)

    return app


async def _respond(send: Any, status: int, body: bytes) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


# --- measurement -----------------------------------------------------------------------


def _cpu_seconds(processes: list[psutil.Process]) -> float:
    total = 0.0
    for process in processes:
        with contextlib.suppress(psutil.NoSuchProcess):
            times = process.cpu_times()
            total += times.user + times.system
    return total


def _tree(pid: int) -> list[psutil.Process]:
    """A process and all its descendants (uvicorn's workers, PostgreSQL's backends)."""
    root = psutil.Process(pid)
    return [root, *root.children(recursive=True)]


def _postgres_processes() -> list[psutil.Process]:
    """The embedded server and its backends; with PIN_DATABASE_URL, every PostgreSQL here."""
    if _POSTMASTER:
        return _tree(_POSTMASTER[0])
    return [p for p in psutil.process_iter(["name"]) if p.info["name"] == "postgres"]


def _wal_position() -> int:
    """The server's write-ahead log position in bytes: what a run wrote, for the capacity
    model (a heartbeat's UPDATE is not HOT, so it writes a new row and index entries)."""

    async def read() -> int:
        conn = await asyncpg.connect(_DSN[0])
        try:
            position: int = await conn.fetchval(WAL_POSITION)
            return position
        finally:
            await conn.close()

    return asyncio.run(read())


def _batch_histogram(port: int) -> dict[str, float]:
    """The API's heartbeat batch-size histogram (cumulative, by upper bound), from /metrics."""
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    found: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith(f"{BATCH_METRIC}_bucket{{"):
            bound = line.split('le="', 1)[1].split('"', 1)[0]
            found[bound] = float(line.rsplit(" ", 1)[1])
        elif line.startswith((f"{BATCH_METRIC}_sum ", f"{BATCH_METRIC}_count ")):
            name, value = line.rsplit(" ", 1)
            found[name.removeprefix(f"{BATCH_METRIC}_")] = float(value)
    return found


def _batches(before: dict[str, float], after: dict[str, float]) -> dict[str, Any] | None:
    """The run's batches: how many, their mean size, and the share at each bucket bound."""
    count = after.get("count", 0) - before.get("count", 0)
    if not count:
        return None
    shares = {
        bound: round((after[bound] - before.get(bound, 0)) / count, 3)
        for bound in after
        if bound not in ("sum", "count")
    }
    return {
        "statements": int(count),
        "meanSize": round((after["sum"] - before.get("sum", 0)) / count, 1),
        "shareAtMostSize": shares,
    }


def _machine_cpu() -> list[int]:
    """The machine's CPU time so far by kind (/proc/stat's first line, in clock ticks)."""
    with open("/proc/stat") as stat:
        return [int(ticks) for ticks in stat.readline().split()[1:9]]


def _cpu_shares(before: list[int], after: list[int]) -> dict[str, float]:
    """How the cores' time went between two readings: busy, idle, or stolen."""
    spent = dict(zip(CPU_KINDS, (b - a for a, b in zip(before, after, strict=True)), strict=True))
    total = max(sum(spent.values()), 1)
    return {
        "busy": round((spent["user"] + spent["nice"] + spent["system"] + spent["irq"]
                       + spent["softirq"]) / total, 3),
        "idle": round((spent["idle"] + spent["iowait"]) / total, 3),
        "steal": round(spent["steal"] / total, 3),
    }  # fmt: skip


def wrk(
    port: int, *, args: argparse.Namespace, sessions: int, seconds: float, rate: float = 0
) -> dict[str, Any]:
    """One wrk run against ``port``; its JSON line, CPU per request of every side, batches."""
    whole_seconds = max(1, round(seconds))  # wrk takes whole seconds
    connections = args.paced_connections if rate else args.connections
    command = [
        "wrk", "-t", str(args.threads), "-c", str(connections), "-d", f"{whole_seconds}s",
        "--timeout", "10s", "-s", str(LUA_SCRIPT), f"http://127.0.0.1:{port}",
        "--", str(sessions), str(rate), str(args.threads),
    ]  # fmt: skip
    env = {**os.environ, "PIN_BENCH_PACED": "1" if rate else "0"}
    # One worker: its /metrics is the whole server's (with more, each has its own).
    batches = port in _API_PORTS and args.workers == 1
    histogram = _batch_histogram(port) if batches else {}
    server, postgres = _tree(_SERVER_PIDS[port]), _postgres_processes()
    cpu_before = (_cpu_seconds(server), _cpu_seconds(postgres))
    wal_before = _wal_position()
    machine_before = _machine_cpu()
    generator_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    generator_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    shares = _cpu_shares(machine_before, _machine_cpu())
    cpu_after = (_cpu_seconds(server), _cpu_seconds(postgres))
    wal_bytes = _wal_position() - wal_before
    if result.returncode != 0:
        raise RuntimeError(f"wrk failed: {result.stderr[-2000:]}")
    measured: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    ok = max(measured["requests"] - measured["failed"], 1)
    measured["serverCpuUsPerRequest"] = round((cpu_after[0] - cpu_before[0]) / ok * 1e6, 1)
    measured["postgresCpuUsPerRequest"] = round((cpu_after[1] - cpu_before[1]) / ok * 1e6, 1)
    measured["walBytesPerRequest"] = round(wal_bytes / ok)
    generator_seconds = (generator_after.ru_utime + generator_after.ru_stime) - (
        generator_before.ru_utime + generator_before.ru_stime
    )
    measured["loadGeneratorCpuUsPerRequest"] = round(generator_seconds / ok * 1e6, 1)
    measured["connections"] = connections
    measured["machineCpu"] = shares
    if batches:
        measured["batches"] = _batches(histogram, _batch_histogram(port))
    for key in ("requestsPerSecond", "p50Ms", "p99Ms", "scheduledP50Ms", "scheduledP99Ms"):
        if key in measured:
            measured[key] = round(measured[key], 2)
    return measured


_SERVER_PIDS: dict[int, int] = {}
_API_PORTS: set[int] = set()
_POSTMASTER: list[int] = []
_DSN: list[str] = []


# --- one row held ---------------------------------------------------------------------

HOLD_ROW = """
select id from user_activity.sessions
where anonymous_id = $1 and status = 'Active'
for update
"""


def _device(i: int) -> str:
    """Device ``i``'s AnonymousId, as SEED_SESSIONS and bench/heartbeat.lua make it."""
    return f"00000000-0000-4000-8000-{i:012x}"


class _RowHolder(threading.Thread):
    """Holds one device's session row for ``seconds`` in a transaction of its own, while
    sending that device's heartbeats one after another (and one more once released)."""

    def __init__(self, port: int, anonymous_id: str, seconds: float) -> None:
        super().__init__(name="row-holder", daemon=True)
        self.port, self.anonymous_id, self.seconds = port, anonymous_id, seconds
        self.held = threading.Event()
        self.answers: list[dict[str, Any]] = []
        self.released_at = 0.0
        self._t0 = 0.0

    def run(self) -> None:
        asyncio.run(self._hold())

    async def _hold(self) -> None:
        released = asyncio.Event()
        conn = await asyncpg.connect(_DSN[0])
        try:
            async with httpx.AsyncClient(
                base_url=f"http://127.0.0.1:{self.port}", timeout=60
            ) as client:
                async with conn.transaction():
                    await conn.execute(HOLD_ROW, uuid.UUID(self.anonymous_id))
                    self._t0 = time.monotonic()
                    self.held.set()
                    sending = asyncio.create_task(self._send(client, released))
                    await asyncio.sleep(self.seconds)
                self.released_at = round(time.monotonic() - self._t0, 2)
                released.set()
                await sending
        finally:
            self.held.set()
            await conn.close()

    async def _send(self, client: httpx.AsyncClient, released: asyncio.Event) -> None:
        while True:
            last = released.is_set()
            sent = time.monotonic()
            response = await client.post(PATH, headers={"X-Anonymous-Id": self.anonymous_id})
            self.answers.append(
                {
                    "sentAtS": round(sent - self._t0, 2),
                    "status": response.status_code,
                    "ms": round((time.monotonic() - sent) * 1000, 1),
                }
            )
            if last:
                return


def _held_row(port: int, args: argparse.Namespace, sessions: int) -> dict[str, Any]:
    """``--rounds`` pairs of paced runs of devices 1..sessions: without, then with, device
    ``sessions + 1``'s row held for ``--hold-row`` seconds; wrk's window lies in the hold."""
    seconds = max(1, int(args.hold_row) - 1)
    free, held, locked = [], [], []
    for _ in range(args.rounds):
        free.append(wrk(port, args=args, sessions=sessions, seconds=seconds, rate=args.rate))
        holder = _RowHolder(port, _device(sessions + 1), args.hold_row)
        holder.start()
        holder.held.wait(timeout=60)
        held.append(wrk(port, args=args, sessions=sessions, seconds=seconds, rate=args.rate))
        holder.join(timeout=args.hold_row + 120)
        locked.append({"releasedAtS": holder.released_at, "answers": holder.answers})
    return {
        "holdSeconds": args.hold_row,
        "wrkSecondsInsideTheHold": seconds,
        "targetPerSecond": args.rate,
        "withoutHeldRow": _medians(free),
        "withHeldRow": _medians(held),
        "lockedDeviceAnswers": locked,
    }


# --- profile ---------------------------------------------------------------------------


def _profile(port: int, args: argparse.Namespace, sessions: int, path: Path) -> dict[str, Any]:
    """One more closed loop of the API, its (first) worker sampled by py-spy meanwhile.

    The raw stacks go to ``path`` (one ``frame;frame;… count`` line per stack, as flame
    graph tools read them); the report gets the run and the functions holding the most
    samples, on their own (self) and with what they call (inclusive).
    """
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    server = psutil.Process(_SERVER_PIDS[port])
    # `serve --workers N` runs its app in N spawned children, one process alone without.
    workers = [p for p in server.children() if "spawn_main" in " ".join(p.cmdline())]
    target = workers[0].pid if workers else server.pid
    seconds = max(1, round(args.duration))
    sampler = subprocess.Popen(
        [spy, "record", "--pid", str(target), "--duration", str(seconds), "--rate", "200",
         "--format", "raw", "--output", str(path), "--nonblocking"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    measured = wrk(port, args=args, sessions=sessions, seconds=seconds)
    if sampler.wait(timeout=seconds + 60) != 0:
        raise RuntimeError(f"py-spy failed (exit {sampler.returncode}); it needs ptrace rights")
    own: Counter[str] = Counter()
    within: Counter[str] = Counter()
    parts: Counter[str] = Counter()
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        raw = stack.split(";")
        frames = [_function(frame) for frame in raw]
        own[frames[-1]] += int(count)
        within.update(dict.fromkeys(frames, int(count)))
        parts[_part(frames, raw[-1])] += int(count)
    total = max(sum(own.values()), 1)
    return {
        "run": measured,
        "samples": total,
        "rateHz": 200,
        "partShare": {name: round(n / total, 3) for name, n in parts.most_common()},
        "selfShare": {name: round(n / total, 3) for name, n in own.most_common(PROFILE_TOP)},
        "inclusiveShare": {
            name: round(n / total, 3) for name, n in within.most_common(PROFILE_TOP * 2)
        },
    }


def _part(frames: list[str], leaf: str) -> str:
    """The first of PROFILE_PARTS that a sample's stack falls in."""
    for name, functions, leaf_files in PROFILE_PARTS:
        if any(f in frame for f in functions for frame in frames) or any(
            where in leaf for where in leaf_files
        ):
            return name
    return "other"


def _function(frame: str) -> str:
    """``name (path/to/module.py:line)`` as ``name (module.py)``: one entry per function."""
    name, _, where = frame.partition(" (")
    return f"{name} ({Path(where.split(':', 1)[0]).name})" if where else name


# --- orchestration ---------------------------------------------------------------------


async def _grow(dsn: str, have: int, want: int) -> None:
    """Seed devices ``have + 1`` .. ``want`` (migrating first when the table is new)."""
    conn = await asyncpg.connect(dsn)
    try:
        if have == 0:
            await migrate(conn)
        step = 1_000_000
        for first in range(have + 1, want + 1, step):
            await conn.execute(SEED_SESSIONS, first, min(first + step - 1, want))
        await conn.execute("vacuum analyze user_activity.sessions")
    finally:
        await conn.close()


@contextlib.contextmanager
def _servers(dsn: str, workers: int) -> Iterator[tuple[int, int]]:
    api_port, baseline_port = free_port(), free_port()
    data_dir = tempfile.mkdtemp(prefix="pin-bench-")
    api_env = {
        "PIN_DATABASE_URL": dsn,
        "PIN_DATA_DIR": data_dir,
        "PIN_SECRET_KEY": "b" * 48,
        "PIN_LOG_LEVEL": "info",
    }
    baseline_env = {
        BASELINE_DSN_VARIABLE: dsn,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(BENCH_DIR), os.environ.get("PYTHONPATH")])),
    }
    _API_PORTS.add(api_port)
    with (
        running_server(api_command(api_port, workers), api_env) as api,
        running_server(baseline_command(baseline_port, workers), baseline_env) as baseline,
    ):
        _SERVER_PIDS.update({api_port: api.pid, baseline_port: baseline.pid})
        yield api_port, baseline_port


@contextlib.contextmanager
def _variant_servers(dsn: str, workers: int, variant_src: Path) -> Iterator[tuple[int, int]]:
    """This tree's API and the one of ``variant_src``, on the same database."""
    ports = current_port, variant_port = free_port(), free_port()
    env = {"PIN_DATABASE_URL": dsn, "PIN_SECRET_KEY": "b" * 48, "PIN_LOG_LEVEL": "info"}
    variant_path = os.pathsep.join(
        filter(None, [str(variant_src / "src"), os.environ.get("PYTHONPATH")])
    )
    _API_PORTS.update(ports)
    with (
        running_server(
            api_command(current_port, workers),
            env | {"PIN_DATA_DIR": tempfile.mkdtemp(prefix="pin-bench-")},
        ) as current,
        running_server(
            api_command(variant_port, workers),
            env
            | {"PIN_DATA_DIR": tempfile.mkdtemp(prefix="pin-bench-"), "PYTHONPATH": variant_path},
        ) as variant,
    ):
        _SERVER_PIDS.update({current_port: current.pid, variant_port: variant.pid})
        yield current_port, variant_port


def _variants(
    current_port: int, variant_port: int, args: argparse.Namespace, sessions: int
) -> dict[str, Any]:
    """The two builds, the variant first in each pair: closed loops, then paced runs."""
    kinds = [("closedLoop", 0.0)] + ([("fixedRate", args.rate)] if args.rate else [])
    report: dict[str, Any] = {"sessions": sessions, "variantSrc": str(args.compare_src)}
    for kind, rate in kinds:
        runs: dict[str, list[dict[str, Any]]] = {"variant": [], "current": []}
        for _ in range(args.rounds):
            for name, port in (("variant", variant_port), ("current", current_port)):
                runs[name].append(
                    wrk(port, args=args, sessions=sessions, seconds=args.duration, rate=rate)
                )
        variant, current = _medians(runs["variant"]), _medians(runs["current"])
        report[kind] = {
            "variant": variant,
            "current": current,
            "roundsServerCpuUsPerRequest": {
                name: [one["serverCpuUsPerRequest"] for one in rounds]
                for name, rounds in runs.items()
            },
            "variantServerCpuRatio": round(
                variant["serverCpuUsPerRequest"] / current["serverCpuUsPerRequest"], 3
            ),
        }
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=100_000)
    parser.add_argument("--duration", type=float, default=8.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--connections", type=int, default=64, help="closed loops")
    parser.add_argument(
        "--paced-connections", type=int, default=256, help="fixed-rate runs (see above)"
    )
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--workers", type=int, default=1, help="processes of each server")
    parser.add_argument("--rate", type=float, default=3000.0)
    parser.add_argument("--sweep", default="", help="table sizes, e.g. 100000,1000000")
    parser.add_argument(
        "--profile", default="", help="file for py-spy's stacks of one more API closed loop"
    )
    parser.add_argument(
        "--hold-row", type=float, default=0, help="seconds one device's row is held (see above)"
    )
    parser.add_argument(
        "--compare-src", type=Path, default=None, help="a tree whose API to compare (see above)"
    )
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        print(WRK_MISSING, file=sys.stderr)
        raise SystemExit(2)
    from pin_sessions.platform.logging import configure_logging

    # Stdout carries the report alone.
    configure_logging("warning", stream=sys.stderr)
    print(json.dumps(run(args), indent=2))


def run(args: argparse.Namespace) -> dict[str, Any]:
    sizes = [int(size) for size in args.sweep.split(",") if size] or [args.sessions]
    report: dict[str, Any] = {
        "benchmark": "heartbeat",
        "loadGenerator": "wrk + bench/heartbeat.lua",
        "durationSeconds": args.duration,
        "rounds": args.rounds,
        "threads": args.threads,
        "connections": args.connections,
        "pacedConnections": args.paced_connections,
        "workersPerServer": args.workers,
        "cpus": os.cpu_count(),
        "loadAverageAtStart": [round(value, 2) for value in os.getloadavg()],
    }
    seeded = 0
    with bench_database() as (dsn, postmaster):
        _DSN.append(dsn)
        if postmaster is not None:
            _POSTMASTER.append(postmaster)
        # With --hold-row, one device more: the one whose row is held, outside wrk's range.
        asyncio.run(_grow(dsn, seeded, sizes[0] + (1 if args.hold_row else 0)))
        seeded = sizes[0]
        if args.compare_src is not None:
            with _variant_servers(dsn, args.workers, args.compare_src) as ports:
                for port in ports:
                    wrk(port, args=args, sessions=seeded, seconds=WARMUP_SECONDS)
                report["variants"] = _variants(*ports, args, seeded)
            return report
        with _servers(dsn, args.workers) as (api_port, baseline_port):
            for port in (api_port, baseline_port):
                wrk(port, args=args, sessions=seeded, seconds=WARMUP_SECONDS)
            if args.hold_row:
                report["heldRow"] = _held_row(api_port, args, seeded)
                return report
            report.update(_compare(api_port, baseline_port, args, seeded))
            if args.profile:
                report["profile"] = _profile(api_port, args, seeded, Path(args.profile))
            report["sweep"] = []
            for size in sizes:
                grown = 0.0
                if size > seeded:
                    started = time.perf_counter()
                    asyncio.run(_grow(dsn, seeded, size))
                    grown = round(time.perf_counter() - started, 1)
                    seeded = size
                    wrk(api_port, args=args, sessions=seeded, seconds=WARMUP_SECONDS)
                at_size = _at_size(api_port, args, seeded)
                report["sweep"].append(at_size | {"seedSeconds": grown})
    return report


def _compare(
    api_port: int, baseline_port: int, args: argparse.Namespace, sessions: int
) -> dict[str, Any]:
    api_rounds, baseline_rounds = [], []
    for _ in range(args.rounds):
        api_rounds.append(wrk(api_port, args=args, sessions=sessions, seconds=args.duration))
        baseline_rounds.append(
            wrk(baseline_port, args=args, sessions=sessions, seconds=args.duration)
        )
    api, baseline = _combined(api_rounds), _combined(baseline_rounds)
    return {
        "sessions": sessions,
        "api": api,
        "baseline": baseline,
        "ratioToBaseline": round(api["requestsPerSecond"] / baseline["requestsPerSecond"], 3),
    }


def _at_size(api_port: int, args: argparse.Namespace, sessions: int) -> dict[str, Any]:
    """The API at one table size: ``--rounds`` closed loops (medians), then the fixed rate.

    Closed loops and paced runs alternate, so a neighbour's burst does not fall on one kind
    only; each size is judged by its medians, one noisy round moving them little.
    """
    closed, paced = [], []
    for _ in range(args.rounds):
        closed.append(wrk(api_port, args=args, sessions=sessions, seconds=args.duration))
        paced.append(
            wrk(api_port, args=args, sessions=sessions, seconds=args.duration, rate=args.rate)
        )
    return {
        "sessions": sessions,
        "closedLoop": _medians(closed),
        "fixedRate": {"targetPerSecond": args.rate, **_medians(paced)},
    }


def _medians(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """The median of each figure over the rounds, and each round's throughput and p99."""
    figures = (
        "requestsPerSecond", "p50Ms", "p99Ms", "scheduledP50Ms", "scheduledP99Ms",
        "serverCpuUsPerRequest", "postgresCpuUsPerRequest", "walBytesPerRequest",
        "loadGeneratorCpuUsPerRequest",
    )  # fmt: skip
    report: dict[str, Any] = {
        "requests": sum(one["requests"] for one in rounds),
        "failed": sum(one["failed"] for one in rounds),
    }
    for key in figures:
        if key in rounds[0]:
            report[key] = round(statistics.median(one[key] for one in rounds), 2)
    report["roundsPerSecond"] = [one["requestsPerSecond"] for one in rounds]
    report["roundsP99Ms"] = [one.get("scheduledP99Ms", one["p99Ms"]) for one in rounds]
    report["roundsMachineCpu"] = [one["machineCpu"] for one in rounds]
    if rounds[0].get("batches"):
        report["batches"] = rounds[len(rounds) // 2]["batches"]
    return report


def _combined(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean throughput and CPU over the rounds; latency percentiles of the worst round."""
    count = len(rounds)
    return {
        "requests": sum(one["requests"] for one in rounds),
        "failed": sum(one["failed"] for one in rounds),
        "requestsPerSecond": round(sum(one["requestsPerSecond"] for one in rounds) / count, 1),
        "p50Ms": max(one["p50Ms"] for one in rounds),
        "p99Ms": max(one["p99Ms"] for one in rounds),
        "serverCpuUsPerRequest": round(
            sum(one["serverCpuUsPerRequest"] for one in rounds) / count, 1
        ),
        "postgresCpuUsPerRequest": round(
            sum(one["postgresCpuUsPerRequest"] for one in rounds) / count, 1
        ),
        "walBytesPerRequest": round(sum(one["walBytesPerRequest"] for one in rounds) / count),
        "loadGeneratorCpuUsPerRequest": round(
            sum(one["loadGeneratorCpuUsPerRequest"] for one in rounds) / count, 1
        ),
        "roundsPerSecond": [round(one["requestsPerSecond"], 1) for one in rounds],
        "roundsMachineCpu": [one["machineCpu"] for one in rounds],
    }


if __name__ == "__main__":
    main()

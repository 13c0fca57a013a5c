"""Heartbeat benchmark: the real API against a bare ASGI app doing the same UPDATE, under wrk.

    python bench/heartbeat.py [--sessions 100000] [--duration 8] [--rounds 2]
                              [--connections 64] [--threads 2] [--rate 3000]
                              [--sweep 100000,1000000,10000000]

Load comes from wrk (Debian package ``wrk``), a native load generator, so the servers'
Python is not also paying for the client's. Seeds ``--sessions`` Active sessions (device
``i`` has the AnonymousId ``00000000-0000-4000-8000-<i in hex>``, which
``bench/heartbeat.lua`` computes too), serves the whole API with uvicorn in one process
and the baseline — a bare ASGI app running the same single ``UPDATE`` through asyncpg
under the same uvicorn — in another, and drives each with wrk's closed loop
(``--threads``, ``--connections``, ``--duration`` seconds), alternating A B A B for
``--rounds`` rounds so a noisy neighbour hits both. Then the API at a fixed ``--rate``
per second, paced by the wrk script, latency counted from each request's scheduled time.

Besides requests per second it reports CPU per heartbeat: the server process's and all
PostgreSQL processes' (user + system time over the run, from psutil), so a gain that only
moves work into the database shows. ``--sweep`` repeats the API's closed loop and fixed
rate at growing table sizes. Prints one JSON object.

PostgreSQL: ``PIN_DATABASE_URL`` when set (its PostgreSQL processes must run on this
machine for the CPU figures), else an embedded server in a temporary directory.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import psutil

from pin_sessions.platform.migrations import migrate

PATH = "/api/user-activity/sessions/heartbeat"
LUA_SCRIPT = Path(__file__).with_name("heartbeat.lua")
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

WRK_MISSING = (
    "bench/heartbeat.py drives its load with wrk, a native HTTP load generator, so that the "
    "client's CPU does not hide the servers' cost; install it (Debian/Ubuntu: "
    "`apt-get install wrk`) and run again."
)


# --- servers ---------------------------------------------------------------------------


def serve_api(dsn: str, port: int) -> None:
    """The whole API, wired by the composition root as ``serve`` wires it."""
    import uvicorn

    from pin_sessions.bootstrap import build_api, build_runtime
    from pin_sessions.platform.logging import configure_logging
    from pin_sessions.settings import load_settings

    # Logging as in production (successful heartbeats are counted, not logged); only the sink
    # differs.
    configure_logging("info", stream=open(os.devnull, "w"))  # noqa: SIM115
    data_dir = tempfile.mkdtemp(prefix="pin-bench-")
    settings = load_settings(
        {"PIN_DATABASE_URL": dsn, "PIN_DATA_DIR": data_dir, "PIN_JWT_SECRET": "b" * 48}
    )
    app = build_api(build_runtime(settings, dsn))
    _run_uvicorn(uvicorn, app, port)


def serve_baseline(dsn: str, port: int) -> None:
    """A bare ASGI app: parse the header, run the same UPDATE, answer JSON."""
    import uvicorn

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

    _run_uvicorn(uvicorn, app, port)


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


def _run_uvicorn(uvicorn: Any, app: Any, port: int) -> None:
    uvicorn.run(
        app,
        host="127.0.0.1",
        port=port,
        log_config=None,
        access_log=False,
        proxy_headers=False,
        lifespan="on",
    )


# --- measurement -----------------------------------------------------------------------


def _cpu_seconds(processes: list[psutil.Process]) -> float:
    total = 0.0
    for process in processes:
        with contextlib.suppress(psutil.NoSuchProcess):
            times = process.cpu_times()
            total += times.user + times.system
    return total


def _postgres_processes() -> list[psutil.Process]:
    """The embedded server and its backends; with PIN_DATABASE_URL, every PostgreSQL here."""
    if _POSTMASTER:
        postmaster = psutil.Process(_POSTMASTER[0])
        return [postmaster, *postmaster.children(recursive=True)]
    return [p for p in psutil.process_iter(["name"]) if p.info["name"] == "postgres"]


def wrk(
    port: int, *, args: argparse.Namespace, sessions: int, seconds: float, rate: float = 0
) -> dict[str, Any]:
    """One wrk run against ``port``; its JSON line, plus CPU per request of both sides."""
    whole_seconds = max(1, round(seconds))  # wrk takes whole seconds
    command = [
        "wrk", "-t", str(args.threads), "-c", str(args.connections), "-d", f"{whole_seconds}s",
        "--timeout", "10s", "-s", str(LUA_SCRIPT), f"http://127.0.0.1:{port}",
        "--", str(sessions), str(rate),
    ]  # fmt: skip
    env = {**os.environ, "PIN_BENCH_PACED": "1" if rate else "0"}
    server = [_listener(port)]
    postgres = _postgres_processes()
    cpu_before = (_cpu_seconds(server), _cpu_seconds(postgres))
    result = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    cpu_after = (_cpu_seconds(server), _cpu_seconds(postgres))
    if result.returncode != 0:
        raise RuntimeError(f"wrk failed: {result.stderr[-2000:]}")
    measured: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    ok = max(measured["requests"] - measured["failed"], 1)
    measured["serverCpuUsPerRequest"] = round((cpu_after[0] - cpu_before[0]) / ok * 1e6, 1)
    measured["postgresCpuUsPerRequest"] = round((cpu_after[1] - cpu_before[1]) / ok * 1e6, 1)
    for key in ("requestsPerSecond", "p50Ms", "p99Ms", "scheduledP50Ms", "scheduledP99Ms"):
        if key in measured:
            measured[key] = round(measured[key], 2)
    return measured


_SERVER_PIDS: dict[int, int] = {}
_POSTMASTER: list[int] = []


def _listener(port: int) -> psutil.Process:
    return psutil.Process(_SERVER_PIDS[port])


# --- orchestration ---------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextlib.contextmanager
def _database() -> Iterator[str]:
    dsn = os.environ.get("PIN_DATABASE_URL")
    if dsn:
        yield dsn
        return
    from pin_sessions.platform.embedded import EmbeddedPostgres

    with tempfile.TemporaryDirectory(prefix="pin-bench-pg-") as workdir:
        embedded = EmbeddedPostgres(Path(workdir) / "pg", delete_on_stop=True)
        try:
            dsn = embedded.start()
            _POSTMASTER.append(int((embedded.pgdata / "postmaster.pid").read_text().split()[0]))
            yield dsn
        finally:
            embedded.stop()


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
def _server(role: str, dsn: str) -> Iterator[int]:
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, __file__, "--role", role, "--dsn", dsn, "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    _SERVER_PIDS[port] = process.pid
    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
                break
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the {role} server did not start")
            time.sleep(0.1)
        yield port
    finally:
        process.terminate()
        process.wait(timeout=15)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=100_000)
    parser.add_argument("--duration", type=float, default=8.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rate", type=float, default=3000.0)
    parser.add_argument("--sweep", default="", help="table sizes, e.g. 100000,1000000")
    parser.add_argument("--role", choices=["api", "baseline"], help=argparse.SUPPRESS)
    parser.add_argument("--dsn", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role == "api":
        serve_api(args.dsn, args.port)
        return
    if args.role == "baseline":
        serve_baseline(args.dsn, args.port)
        return
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
        "cpus": os.cpu_count(),
        "loadAverageAtStart": [round(value, 2) for value in os.getloadavg()],
    }
    seeded = 0
    with _database() as dsn:
        asyncio.run(_grow(dsn, seeded, sizes[0]))
        seeded = sizes[0]
        with _server("api", dsn) as api_port, _server("baseline", dsn) as baseline_port:
            for port in (api_port, baseline_port):
                wrk(port, args=args, sessions=seeded, seconds=WARMUP_SECONDS)
            report.update(_compare(api_port, baseline_port, args, seeded))
            report["sweep"] = []
            for size in sizes:
                if size > seeded:
                    asyncio.run(_grow(dsn, seeded, size))
                    seeded = size
                    wrk(api_port, args=args, sessions=seeded, seconds=WARMUP_SECONDS)
                report["sweep"].append(_at_size(api_port, args, seeded))
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
    closed = wrk(api_port, args=args, sessions=sessions, seconds=args.duration)
    paced = wrk(api_port, args=args, sessions=sessions, seconds=args.duration, rate=args.rate)
    return {
        "sessions": sessions,
        "closedLoop": closed,
        "fixedRate": {"targetPerSecond": args.rate, **paced},
    }


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
        "roundsPerSecond": [round(one["requestsPerSecond"], 1) for one in rounds],
    }


if __name__ == "__main__":
    main()

"""Heartbeat benchmark: the real API against a minimal ASGI baseline doing the same UPDATE.

    python bench/heartbeat.py [--sessions 100000] [--duration 20] [--rounds 2]
                              [--connections 64] [--rate 1700]

Seeds ``--sessions`` Active sessions, serves the whole API with uvicorn on loopback in a
separate process, and drives heartbeats from another process over keep-alive HTTP/1.1
connections, as fast as they answer, for ``--duration`` seconds; the baseline — a
bare ASGI app running the same single ``UPDATE`` through asyncpg under the same
uvicorn — gets the same run right after, ``--rounds`` times in turn. Last, the API at a
fixed ``--rate`` per second, latency counted from each request's scheduled time so a
stalled server cannot hide its queue. Prints one JSON object.

PostgreSQL: ``PIN_DATABASE_URL`` when set, else an embedded server in a temporary
directory. Server, database and load generator share this machine's cores.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
import random
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

from pin_sessions.platform.migrations import migrate
from pin_sessions.user_activity import sql

PATH = "/api/user-activity/sessions/heartbeat"
TARGET_RATIO = 0.6
TARGET_RPS = 2000
TARGET_P99_MS = 50.0

SEED_SESSIONS = """
insert into user_activity.sessions
    (id, anonymous_id, status, created_at, last_activity_at, device_user_agent, device_type)
select gen_random_uuid(), md5($1 || i::text)::uuid, 'Active', now(), now(), 'bench', 'Desktop'
from generate_series(1, $2) as i
"""


def anonymous_ids(seed: str, count: int) -> list[str]:
    """The devices SEED_SESSIONS created, computed the same way PostgreSQL did."""
    return [
        str(uuid.UUID(hashlib.md5(f"{seed}{i}".encode()).hexdigest())) for i in range(1, count + 1)
    ]


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
        row = await pool.fetchrow(sql.HEARTBEAT, anonymous_id, datetime.now(UTC))
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


# --- load ------------------------------------------------------------------------------


async def _one_connection(
    port: int,
    ids: list[str],
    latencies: list[float],
    counts: dict[str, int],
    stop_at: float,
    measure_from: float,
    schedule: Iterator[float] | None,
) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        while True:
            planned = next(schedule) if schedule is not None else time.perf_counter()
            if planned >= stop_at:
                return
            delay = planned - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            started = time.perf_counter()
            if schedule is None:
                planned = started
            writer.write(
                (
                    f"POST {PATH} HTTP/1.1\r\nHost: bench\r\n"
                    f"X-Anonymous-Id: {random.choice(ids)}\r\nContent-Length: 0\r\n\r\n"
                ).encode()
            )
            status = int((await reader.readline()).split()[1])
            length = 0
            while (line := await reader.readline()) not in (b"\r\n", b""):
                name, _, value = line.partition(b":")
                if name.lower() == b"content-length":
                    length = int(value)
            await reader.readexactly(length)
            finished = time.perf_counter()
            if planned >= measure_from:
                latencies.append(finished - planned)
                counts["ok" if status == 200 else "failed"] += 1
                counts["last"] = max(counts["last"], int((finished - measure_from) * 1e6))
    finally:
        writer.close()


async def drive(
    port: int, ids: list[str], *, duration: float, warmup: float, connections: int, rate: float
) -> dict[str, Any]:
    """Closed loop when ``rate`` is 0, else open loop at ``rate`` requests per second."""
    latencies: list[float] = []
    # "last": microseconds from the window's start to the last answer, so a fixed-rate run
    # reports the rate it achieved rather than the rate it asked for.
    counts = {"ok": 0, "failed": 0, "last": 0}
    begin = time.perf_counter() + 0.2
    measure_from = begin + warmup
    stop_at = measure_from + duration

    def schedule(worker: int) -> Iterator[float] | None:
        if not rate:
            return None
        return (begin + index / rate for index in range(worker, 10**12, connections))

    await asyncio.gather(
        *(
            _one_connection(port, ids, latencies, counts, stop_at, measure_from, schedule(k))
            for k in range(connections)
        )
    )
    latencies.sort()
    return {
        "requests": counts["ok"],
        "failed": counts["failed"],
        "requestsPerSecond": round(counts["ok"] / max(duration, counts["last"] / 1e6), 1),
        "p50Ms": round(_percentile(latencies, 0.50) * 1000, 2),
        "p99Ms": round(_percentile(latencies, 0.99) * 1000, 2),
    }


def _percentile(sorted_values: list[float], fraction: float) -> float:
    if not sorted_values:
        return float("nan")
    return sorted_values[min(len(sorted_values) - 1, int(len(sorted_values) * fraction))]


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
            yield embedded.start()
        finally:
            embedded.stop()


async def _prepare(dsn: str, seed: str, sessions: int) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await migrate(conn)
        await conn.execute(SEED_SESSIONS, seed, sessions)
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


def _load(port: int, args: argparse.Namespace, seed: str, rate: float) -> dict[str, Any]:
    """Run the load generator in its own process, as a client machine would be."""
    command = [
        sys.executable, __file__, "--role", "load", "--port", str(port), "--seed", seed,
        "--sessions", str(args.sessions), "--duration", str(args.duration),
        "--warmup", str(args.warmup), "--connections", str(args.connections),
        "--load-rate", str(rate),
    ]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"the load generator failed: {result.stderr[-2000:]}")
    measured: dict[str, Any] = json.loads(result.stdout)
    return measured


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=100_000)
    parser.add_argument("--duration", type=float, default=20.0)
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--rate", type=float, default=1700.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--role", choices=["api", "baseline", "load"], help=argparse.SUPPRESS)
    parser.add_argument("--dsn", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--seed", help=argparse.SUPPRESS)
    parser.add_argument("--load-rate", type=float, default=0.0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role == "api":
        serve_api(args.dsn, args.port)
        return
    if args.role == "baseline":
        serve_baseline(args.dsn, args.port)
        return
    if args.role == "load":
        ids = anonymous_ids(args.seed, args.sessions)
        measured = asyncio.run(
            drive(
                args.port,
                ids,
                duration=args.duration,
                warmup=args.warmup,
                connections=args.connections,
                rate=args.load_rate,
            )
        )
        print(json.dumps(measured))
        return
    print(json.dumps(run(args), indent=2))


def run(args: argparse.Namespace) -> dict[str, Any]:
    seed = uuid.uuid4().hex
    api_rounds: list[dict[str, Any]] = []
    baseline_rounds: list[dict[str, Any]] = []
    with _database() as dsn:
        asyncio.run(_prepare(dsn, seed, args.sessions))
        with _server("api", dsn) as api_port, _server("baseline", dsn) as baseline_port:
            # Alternate the two, so a neighbour's burst on this shared machine hits both.
            for _ in range(args.rounds):
                api_rounds.append(_load(api_port, args, seed, 0))
                baseline_rounds.append(_load(baseline_port, args, seed, 0))
            fixed = _load(api_port, args, seed, args.rate)
    api, baseline = _combined(api_rounds), _combined(baseline_rounds)
    ratio = round(api["requestsPerSecond"] / baseline["requestsPerSecond"], 3)
    return {
        "benchmark": "heartbeat",
        "sessions": args.sessions,
        "durationSeconds": args.duration,
        "rounds": args.rounds,
        "connections": args.connections,
        "cpus": os.cpu_count(),
        "api": api,
        "baseline": baseline,
        "ratioToBaseline": ratio,
        "fixedRate": {"targetPerSecond": args.rate, **fixed},
        "targets": {
            "ratioAtLeast0.6": ratio >= TARGET_RATIO,
            "atLeast2000PerSecond": api["requestsPerSecond"] >= TARGET_RPS,
            "p99Under50MsAt1700PerSecond": fixed["p99Ms"] < TARGET_P99_MS
            and fixed["requestsPerSecond"] >= args.rate * 0.98,
        },
    }


def _combined(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Throughput over all rounds; latency percentiles of the worst round."""
    return {
        "requests": sum(one["requests"] for one in rounds),
        "failed": sum(one["failed"] for one in rounds),
        "requestsPerSecond": round(
            sum(one["requestsPerSecond"] for one in rounds) / len(rounds), 1
        ),
        "p50Ms": max(one["p50Ms"] for one in rounds),
        "p99Ms": max(one["p99Ms"] for one in rounds),
        "roundsPerSecond": [one["requestsPerSecond"] for one in rounds],
    }


if __name__ == "__main__":
    main()

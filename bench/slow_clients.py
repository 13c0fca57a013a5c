"""Slow clients benchmark: other clients' heartbeat latency with thousands of slow connections open.

    python bench/slow_clients.py [--slow 3000] [--rate 300] [--duration 10] [--rounds 5]
                                 [--read-timeout 30] [--sessions 10000]

Serves the API as production does (``pin-sessions serve``, ``PIN_HTTP__READ_TIMEOUT`` from
``--read-timeout``) on seeded Active sessions. Heartbeats at a fixed ``--rate`` per second
come from wrk (Debian package ``wrk``) with ``bench/heartbeat.lua``'s pacing: latency is
counted from each request's scheduled time, so a server that falls behind is charged for
its queue. Rounds alternate: the heartbeats alone, then the same with ``--slow`` slow
connections held open by this process throughout — a third that never send a byte, a
third that trickle their headers, a third that sent ``Content-Length: 100`` and ten bytes
and trickle the rest (a byte every few seconds each, never idle for the read timeout) —
opened before the heartbeats start and still open when they end. The last round's slow
connections are then left to the server: it must close every one of them about the read
timeout after it opened, and its file descriptors come back down.

Reports per round p50/p99 (scheduled), requests per second, the server's CPU per heartbeat
and the machine's CPU shares (busy, idle, stolen: other work on a shared machine moves the
tail far more than anything measured here), and the medians over the rounds; the server's
open file descriptors idle, with the slow connections, and after the read timeout; and how
long the server took to close the slow connections. The fd limit of this process (inherited by the
server) is raised to its hard limit. Prints one JSON object. PostgreSQL: ``PIN_DATABASE_URL``
when set, else an embedded server in a temporary directory.
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
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import asyncpg
import psutil
from heartbeat import LUA_SCRIPT, SEED_SESSIONS, _cpu_shares, _machine_cpu
from serving import bench_database, free_port, running_server

from pin_sessions.platform.migrations import migrate

TRICKLE_SECONDS = 5.0
SLOW_KINDS = ("idle", "headers", "body")
PACED_CONNECTIONS = 64
THREADS = 2


async def _prepare(dsn: str, sessions: int) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await migrate(conn)
        await conn.execute(SEED_SESSIONS, 1, sessions)
        await conn.execute("vacuum analyze user_activity.sessions")
    finally:
        await conn.close()


class SlowClient:
    """One connection that never completes its request: idle, or trickling."""

    def __init__(self, kind: str, port: int) -> None:
        self.kind = kind
        self.port = port
        self.opened = 0.0
        self.closed_after: float | None = None
        self.closed = asyncio.Event()
        self._writer: asyncio.StreamWriter | None = None
        self._tasks: list[asyncio.Task[None]] = []

    async def open(self) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        self.opened = time.monotonic()
        self._writer = writer
        if self.kind == "body":
            writer.write(
                b"POST /api/user-activity/sessions/heartbeat HTTP/1.1\r\nHost: bench\r\n"
                b"X-Anonymous-Id: 00000000-0000-4000-8000-000000000001\r\n"
                b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n" + b'{"a": "bbb'
            )
        elif self.kind == "headers":
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: bench\r\n")
        self._tasks = [asyncio.create_task(self._watch(reader))]
        if self.kind != "idle":
            self._tasks.append(asyncio.create_task(self._trickle(writer)))

    async def _watch(self, reader: asyncio.StreamReader) -> None:
        with contextlib.suppress(OSError):
            await reader.read()
        self.closed_after = time.monotonic() - self.opened
        self.closed.set()

    async def _trickle(self, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError):
            while not writer.transport.is_closing():
                await asyncio.sleep(TRICKLE_SECONDS)
                writer.write(b"x-" if self.kind == "headers" else b"c")
                await writer.drain()

    def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        if self._writer is not None:
            self._writer.close()


async def _open_slow(count: int, port: int) -> list[SlowClient]:
    clients = [SlowClient(SLOW_KINDS[i % len(SLOW_KINDS)], port) for i in range(count)]
    for start in range(0, count, 200):  # in steps: the listen backlog is finite
        await asyncio.gather(*(client.open() for client in clients[start : start + 200]))
    return clients


async def _wrk(port: int, args: argparse.Namespace, server: psutil.Process) -> dict[str, Any]:
    """One paced run; its latency, and what it cost the server and the machine."""
    machine_before, server_before = _machine_cpu(), _cpu_seconds(server)
    command = [
        "wrk", "-t", str(THREADS), "-c", str(PACED_CONNECTIONS), "-d", f"{args.duration}s",
        "--timeout", "10s", "-s", str(LUA_SCRIPT), f"http://127.0.0.1:{port}",
        "--", str(args.sessions), str(args.rate), str(THREADS),
    ]  # fmt: skip
    process = await asyncio.create_subprocess_exec(
        *command,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PIN_BENCH_PACED": "1"},
    )
    out, err = await process.communicate()
    if process.returncode != 0:
        raise RuntimeError(f"wrk failed: {err.decode()[-2000:]}")
    result: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
    served = max(result["requests"] - result["failed"], 1)
    measured: dict[str, Any] = {
        key: round(result[key], 2)
        for key in ("requestsPerSecond", "scheduledP50Ms", "scheduledP99Ms", "p99Ms", "failed")
        if key in result
    }
    measured["serverCpuUsPerRequest"] = round(
        (_cpu_seconds(server) - server_before) / served * 1e6, 1
    )
    measured["machineCpu"] = _cpu_shares(machine_before, _machine_cpu())
    return measured


def _cpu_seconds(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


async def _measure(port: int, server: psutil.Process, args: argparse.Namespace) -> dict[str, Any]:
    fds_alone = server.num_fds()
    await _wrk(port, argparse.Namespace(**{**vars(args), "duration": 2}), server)  # warm up
    alone: list[dict[str, Any]] = []
    with_slow: list[dict[str, Any]] = []
    clients: list[SlowClient] = []
    fds_with_slow = 0
    for round_number in range(args.rounds):
        alone.append(await _wrk(port, args, server))
        clients = await _open_slow(args.slow, port)
        await asyncio.sleep(1)  # the last ones accepted
        fds_with_slow = server.num_fds()
        run = await _wrk(port, args, server)
        run["slowStillOpen"] = sum(client.closed_after is None for client in clients)
        with_slow.append(run)
        if round_number < args.rounds - 1:
            for client in clients:
                client.close()
            await asyncio.sleep(1)
    all_closed = asyncio.gather(*(client.closed.wait() for client in clients))
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(all_closed, timeout=args.read_timeout * 2 + 30)
    closed = [c.closed_after for c in clients if c.closed_after is not None]
    fds_after = server.num_fds()  # before this process lets go of what the server kept
    for client in clients:
        client.close()
    await asyncio.sleep(1)
    return {
        "alone": alone,
        "withSlowClients": with_slow,
        "median": {
            name: {
                key: round(statistics.median(r[key] for r in runs), 2)
                for key in ("scheduledP50Ms", "scheduledP99Ms", "serverCpuUsPerRequest")
            }
            for name, runs in (("alone", alone), ("withSlowClients", with_slow))
        },
        "serverOpenFds": {
            "idle": fds_alone,
            "withSlowClients": fds_with_slow,
            "afterReadTimeout": fds_after,
        },
        "slowClosedByServer": {
            "count": len(closed),
            "of": len(clients),
            "firstAfterSeconds": round(min(closed), 2) if closed else None,
            "lastAfterSeconds": round(max(closed), 2) if closed else None,
        },
    }


@contextlib.contextmanager
def _api(dsn: str, args: argparse.Namespace) -> Iterator[tuple[int, psutil.Process]]:
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="pin-bench-") as data_dir:
        env = {
            "PIN_DATABASE_URL": dsn,
            "PIN_DATA_DIR": data_dir,
            "PIN_SECRET_KEY": "b" * 48,
            "PIN_LOG_LEVEL": "warning",
            "PIN_HTTP__READ_TIMEOUT": str(args.read_timeout),
        }
        command = [sys.executable, "-m", "pin_sessions", "serve", "--port", str(port)]
        with running_server(command, env) as process:
            yield port, psutil.Process(process.pid)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slow", type=int, default=3000)
    parser.add_argument("--rate", type=int, default=300)
    parser.add_argument("--duration", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--read-timeout", type=float, default=30.0)
    parser.add_argument("--sessions", type=int, default=10_000)
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("bench/slow_clients.py paces its heartbeats with wrk: `apt-get install wrk`")
    if args.duration + 5 >= args.read_timeout:
        sys.exit("--duration must end well within --read-timeout: the slow clients must last")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    with bench_database() as (dsn, _):
        asyncio.run(_prepare(dsn, args.sessions))
        with _api(dsn, args) as (port, server):
            report = asyncio.run(_measure(port, server, args))
    print(
        json.dumps(
            {
                "slowConnections": args.slow,
                "readTimeoutSeconds": args.read_timeout,
                "heartbeatsPerSecond": args.rate,
                "pacedConnections": PACED_CONNECTIONS,
                "fdLimit": {"before": soft, "raisedTo": hard},
                "loadAverage": [round(value, 1) for value in os.getloadavg()],
                **report,
            }
        )
    )


if __name__ == "__main__":
    main()

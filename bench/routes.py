"""Every hot route's CPU per request against the floor: the bare server answering a fixed body.

    python bench/routes.py [--routes start,heartbeat,…] [--devices 100000] [--duration 5]
                           [--rounds 3] [--connections 16] [--threads 2] [--users 64]
                           [--codes 6000] [--profile heartbeat-user,refresh] [--profile-dir .]

Serves the API exactly as production does (``pin-sessions serve --workers 1``) and, beside
it, the floor (``bench/floor.py``: the same server settings, a fixed JSON body). For each
route, wrk (``bench/routes.lua``) sends the route's requests to the floor and to the API in
turn, ``--rounds`` times each after a warm-up; each run's CPU per answered request — the
server's (less its idle rate, measured before the runs) and PostgreSQL's, from psutil — and
the cores' stolen share (/proc/stat), with the medians and the route's target.

Routes: ``start`` (a seeded device's session continued), ``heartbeat`` (a guest's),
``heartbeat-user`` (a signed-in user's: a Bearer token, picked among ``--users``, reused as
clients reuse theirs), ``action``, ``view`` (a property view started), ``refresh`` (each
token rotated once: every thread starts with its share of a token per connection and sends
on the one each answer carries), ``confirm`` (sign-in codes requested beforehand through
the API, each confirmed once), ``token`` (``/oauth/token``, HTTP Basic) and
``introspect`` (``/oauth/introspect`` of a user's access token). With ``--profile``, one
more API run of each named route has py-spy sampling the server: the stacks go to
``--profile-dir`` and the functions holding the most samples into the report.

CPU per request is the robust figure on a shared machine; throughput is not. Prints one JSON
object. PostgreSQL: ``PIN_DATABASE_URL`` when set (on this machine, for its CPU), else an
embedded server in a temporary directory.
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
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import route_inputs
from floor import floor_command
from heartbeat import (
    WRK_MISSING,
    _cpu_seconds,
    _cpu_shares,
    _function,
    _grow,
    _machine_cpu,
    _tree,
    api_command,
)
from serving import bench_database, free_port, running_server

BENCH_DIR = Path(__file__).parent
LUA_SCRIPT = BENCH_DIR / "routes.lua"
ROUTES = (
    "heartbeat-user", "introspect", "heartbeat", "start", "action", "view", "refresh",
    "confirm", "token",
)  # fmt: skip
# µs of server CPU per request (a ratio to the floor for the heartbeats).
TARGETS: dict[str, dict[str, float]] = {
    "heartbeat": {"floorRatio": 2.5},
    "heartbeat-user": {"floorRatio": 2.5},
    "start": {"us": 400},
    "action": {"us": 300},
    "view": {"us": 300},
    "refresh": {"us": 1000},
    "token": {"us": 500},  # 2,000/s per core
}
WARMUP_SECONDS = 2
IDLE_SECONDS = 5
PROFILE_TOP = 20
SECRET = "b" * 48


# --- one run ---------------------------------------------------------------------------


class Bench:
    """The two servers, PostgreSQL, the prepared inputs, and the runs against them."""

    def __init__(self, args: argparse.Namespace, postmaster: int | None) -> None:
        self.args = args
        self.postmaster = postmaster
        self.pids: dict[str, int] = {}
        self.ports: dict[str, int] = {}
        self.inputs: dict[str, Path] = {}
        self.basic = ""
        self.confirmed = 0  # confirm bodies the API has used up
        # Each server's CPU per second with no request (its background tasks), by side.
        self.idle: dict[str, float] = {}

    def measure_idle(self, seconds: float = IDLE_SECONDS) -> None:
        """What each server spends per second untouched: taken off its runs' CPU, since on a
        starved machine a run may answer few requests and the background would count large."""
        trees = {side: _tree(pid) for side, pid in self.pids.items()}
        before = {side: _cpu_seconds(tree) for side, tree in trees.items()}
        time.sleep(seconds)
        self.idle = {
            side: (_cpu_seconds(tree) - before[side]) / seconds for side, tree in trees.items()
        }

    def postgres(self) -> list[psutil.Process]:
        if self.postmaster is not None:
            return _tree(self.postmaster)
        return [p for p in psutil.process_iter(["name"]) if p.info["name"] == "postgres"]

    def wrk(self, side: str, route: str, seconds: int) -> dict[str, Any]:
        """One wrk run of ``route`` against ``side`` (api or floor), CPU per request."""
        offset = self.confirmed if side == "api" else 0
        command = [
            "wrk", "-t", str(self.args.threads), "-c", str(self.args.connections),
            "-d", f"{seconds}s", "--timeout", "10s", "-s", str(LUA_SCRIPT),
            f"http://127.0.0.1:{self.ports[side]}", "--", route, str(self.args.devices),
            str(self.inputs.get(route, "-")), str(offset), self.basic or "-",
        ]  # fmt: skip
        env = {**os.environ, "PIN_BENCH_THREADS": str(self.args.threads)}
        if side == "api" and route == "refresh":
            # The API rotates them: the next run starts from the tokens this one left unused.
            env["PIN_BENCH_REFRESH_OUT"] = str(self.inputs[route])
        server, postgres = _tree(self.pids[side]), self.postgres()
        before = (_cpu_seconds(server), _cpu_seconds(postgres))
        machine = _machine_cpu()
        generator = resource.getrusage(resource.RUSAGE_CHILDREN)
        done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
        used = resource.getrusage(resource.RUSAGE_CHILDREN)
        shares = _cpu_shares(machine, _machine_cpu())
        after = (_cpu_seconds(server), _cpu_seconds(postgres))
        if done.returncode != 0:
            raise RuntimeError(f"wrk failed: {done.stderr[-2000:]}")
        measured: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
        if side == "api" and route == "confirm":
            # Requests in flight when wrk stopped may have used a code too.
            self.confirmed += measured["requests"] + self.args.connections
        ok = max(measured["requests"] - measured["failed"], 1)
        background = self.idle.get(side, 0.0) * measured["seconds"]
        generator_seconds = used.ru_utime + used.ru_stime - generator.ru_utime - generator.ru_stime
        return {
            "requests": measured["requests"],
            "failed": measured["failed"],
            "requestsPerSecond": round(measured["requestsPerSecond"], 1),
            "p50Ms": round(measured["p50Ms"], 2),
            "p99Ms": round(measured["p99Ms"], 2),
            "serverCpuUs": round((after[0] - before[0] - background) / ok * 1e6, 1),
            "serverCpuUsWithIdle": round((after[0] - before[0]) / ok * 1e6, 1),
            "postgresCpuUs": round((after[1] - before[1]) / ok * 1e6, 1),
            "loadGeneratorCpuUs": round(generator_seconds / ok * 1e6, 1),
            "machineCpu": shares,
        }

    def route(self, route: str) -> dict[str, Any]:
        """Warm-up, then floor and API alternated ``--rounds`` times; medians and target."""
        for side in ("floor", "api"):
            self.wrk(side, route, WARMUP_SECONDS)
        floor, api = [], []
        for _ in range(self.args.rounds):
            floor.append(self.wrk("floor", route, self.args.duration))
            api.append(self.wrk("api", route, self.args.duration))
        api_us = _median(api, "serverCpuUs")
        floor_us = _median(floor, "serverCpuUs")
        report: dict[str, Any] = {
            "serverCpuUs": api_us,
            "floorCpuUs": floor_us,
            "floorRatio": round(api_us / floor_us, 2),
            "postgresCpuUs": _median(api, "postgresCpuUs"),
            "perCoreRequestsPerSecond": round(1e6 / api_us),
            "requestsPerSecond": _median(api, "requestsPerSecond"),
            "floorRequestsPerSecond": _median(floor, "requestsPerSecond"),
            "failed": sum(one["failed"] for one in api),
            "steal": [one["machineCpu"]["steal"] for one in api + floor],
            "rounds": {"api": api, "floor": floor},
        }
        report["target"] = TARGETS.get(route, {})
        report["met"] = _met(report)
        return report

    def profile(self, route: str, stacks: Path) -> dict[str, Any]:
        """One more API run of ``route`` with py-spy sampling the server at 200 Hz."""
        spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
        server = psutil.Process(self.pids["api"])
        workers = [p for p in server.children() if "spawn_main" in " ".join(p.cmdline())]
        target = workers[0].pid if workers else server.pid
        sampler = subprocess.Popen(
            [spy, "record", "--pid", str(target), "--duration", str(self.args.duration),
             "--rate", "200", "--format", "raw", "--output", str(stacks), "--nonblocking"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        run = self.wrk("api", route, self.args.duration)
        if sampler.wait(timeout=self.args.duration + 60) != 0:
            raise RuntimeError(f"py-spy failed (exit {sampler.returncode}); it needs ptrace")
        own: Counter[str] = Counter()
        within: Counter[str] = Counter()
        for line in stacks.read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            frames = [_function(frame) for frame in stack.split(";")]
            own[frames[-1]] += int(count)
            within.update(dict.fromkeys(frames, int(count)))
        total = max(sum(own.values()), 1)
        return {
            "run": run,
            "samples": total,
            "selfShare": {name: round(n / total, 3) for name, n in own.most_common(PROFILE_TOP)},
            "inclusiveShare": {
                name: round(n / total, 3) for name, n in within.most_common(PROFILE_TOP * 2)
            },
        }


def _median(rounds: list[dict[str, Any]], key: str) -> float:
    return round(statistics.median(float(one[key]) for one in rounds), 1)


def _met(report: dict[str, Any]) -> bool | None:
    target = report["target"]
    if "floorRatio" in target:
        return bool(report["floorRatio"] <= target["floorRatio"])
    if "us" in target:
        return bool(report["serverCpuUs"] <= target["us"])
    return None


# --- prepared inputs -------------------------------------------------------------------


def prepare(bench: Bench, routes: list[str], workdir: Path, env: dict[str, str]) -> None:
    """Access and refresh tokens and an OAuth client, as the routes need."""
    args, url = bench.args, _API_URL[0]
    if {"heartbeat-user", "introspect"} & set(routes):
        access = route_inputs.access_tokens(url, args.users, workdir / "access.txt")
        bench.inputs["heartbeat-user"] = bench.inputs["introspect"] = access
    if "refresh" in routes:
        # A token per connection and run: each answer's successor takes its place, but
        # those in flight when a run ends may have been rotated, and are not used again.
        count = args.connections * (args.rounds + 4)
        bench.inputs["refresh"] = route_inputs.refresh_tokens(url, count, workdir / "refresh.txt")
    if {"token", "introspect"} & set(routes):
        bench.basic = route_inputs.basic_credentials(env)


def prepare_codes(bench: Bench, workdir: Path) -> None:
    """Sign-in codes to confirm, requested right before their route: a code lives 5 minutes."""
    path = workdir / "confirm.txt"
    bench.inputs["confirm"] = route_inputs.confirm_bodies(_API_URL[0], bench.args.codes, path)


_API_URL: list[str] = []


# --- orchestration ---------------------------------------------------------------------


@contextlib.contextmanager
def _servers(bench: Bench, env: dict[str, str]) -> Iterator[None]:
    bench.ports = {"api": free_port(), "floor": free_port()}
    floor_env = {
        "PYTHONPATH": os.pathsep.join(filter(None, [str(BENCH_DIR), os.environ.get("PYTHONPATH")]))
    }
    with (
        running_server(api_command(bench.ports["api"], 1), env) as api,
        running_server(floor_command(bench.ports["floor"]), floor_env) as floor,
    ):
        bench.pids = {"api": api.pid, "floor": floor.pid}
        _API_URL[:] = [f"http://127.0.0.1:{bench.ports['api']}"]
        yield


def _steal_share() -> float:
    """The share of the cores' time stolen since boot: the machine's standing, for the record."""
    return _cpu_shares([0] * 8, _machine_cpu())["steal"]


def run(args: argparse.Namespace) -> dict[str, Any]:
    routes = [route for route in ROUTES if route in args.routes.split(",")]
    report: dict[str, Any] = {
        "benchmark": "routes",
        "durationSeconds": args.duration,
        "rounds": args.rounds,
        "connections": args.connections,
        "threads": args.threads,
        "cpus": os.cpu_count(),
        "loadAverageAtStart": [round(value, 2) for value in os.getloadavg()],
        "stealShareSinceBoot": _steal_share(),
        "routes": {},
    }
    with (
        bench_database() as (dsn, postmaster),
        tempfile.TemporaryDirectory(prefix="pin-bench-") as workdir,
    ):
        asyncio.run(_grow(dsn, 0, args.devices))
        env = {
            "PIN_DATABASE_URL": dsn,
            "PIN_DATA_DIR": workdir,
            "PIN_SECRET_KEY": SECRET,
            "PIN_LOG_LEVEL": "info",
            "PIN_DEV_CODES": "1",
            "PIN_SIGN_IN__PER_IP_LIMIT": str(10**9),
            "PIN_SIGN_IN__GLOBAL_LIMIT": str(10**9),
        }
        bench = Bench(args, postmaster)
        with _servers(bench, env):
            prepare(bench, routes, Path(workdir), env)
            bench.measure_idle()
            report["idleCpuMsPerSecond"] = {
                side: round(rate * 1e3, 1) for side, rate in bench.idle.items()
            }
            for route in routes:
                if route == "confirm":
                    prepare_codes(bench, Path(workdir))
                report["routes"][route] = bench.route(route)
            for route in filter(None, args.profile.split(",")):
                stacks = Path(args.profile_dir) / f"{route}.stacks"
                report["routes"][route]["profile"] = bench.profile(route, stacks)
    report["loadAverageAtEnd"] = [round(value, 2) for value in os.getloadavg()]
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--routes", default=",".join(ROUTES))
    parser.add_argument("--devices", type=int, default=100_000)
    parser.add_argument("--duration", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--users", type=int, default=64, help="signed-in users' tokens")
    parser.add_argument("--codes", type=int, default=6000, help="sign-in codes to confirm")
    parser.add_argument("--profile", default="", help="routes to profile, comma separated")
    parser.add_argument("--profile-dir", default=".")
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        print(WRK_MISSING, file=sys.stderr)
        raise SystemExit(2)
    from pin_sessions.platform.logging import configure_logging

    # Stdout carries the report alone.
    configure_logging("warning", stream=sys.stderr)
    print(json.dumps(run(args), indent=2))


if __name__ == "__main__":
    main()

"""One soak run, start to end: database, roles, traffic and faults, settling, books, report.

``bench/soak.py`` parses the command line and calls :func:`run`; the module docstring
there says what a run is.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import resource
import socket
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import httpx
import psutil
from soak_books import count_double_active, install_ledger, reconcile, settle
from soak_faults import ALL, DEFAULT, Faults
from soak_processes import PROJECT_ROOT, Fleet, Role, cpu_seconds, process_tree
from soak_report import evaluate, timeline
from soak_services import Erasures, ServiceClient, erasure_loop, service_loop, viewer_loop
from soak_sms import SmsGateway
from soak_traffic import Plan, World, population
from soak_wire import Recorder, Wire

if TYPE_CHECKING:
    from tests.support.kafka import KafkaCluster

SECRET_KEY = "soak-secret-key-long-enough-for-every-derived-key"
VIEWER_PHONE = "+447700900027"
JOBS = ("expire-sessions", "session-retention", "activity-closer", "activity-retention",
        "signing-keys")  # fmt: skip
CONSUMERS = ("identity-signed-in", "dev-stats-session-ended", "user-activity-user-erased",
             "dev-stats-user-erased")  # fmt: skip
CPU_KINDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
# Calm after the last fault, so its recovery is seen; and how long the outbox may take.
TAIL_SECONDS = 8.0
SETTLE_SECONDS = 180.0


@dataclass
class Options:
    duration: float
    devices: int
    rate: float
    bus: str
    faults: str
    database_url: str | None
    report: Path | None
    plot: Path | None
    erasures: int
    seed: int
    budget_scale: float
    recovery: float
    closer_threshold: float
    pause: float
    workdir: Path | None
    call_timeout: float = 10.0
    # Seconds of traffic whose latencies are reported apart (soak_report); the faults start
    # after them. None: the first 10 % of the run.
    warmup: float | None = None
    # Seconds from one fault's end to the next one's start. None: 5 % of the run, at least
    # 2 s and at most the recovery allowance + 20 s — a long run's faults leave calm between
    # them, where the steady state is judged; a short run's follow one another to fit.
    gap: float | None = None

    @property
    def warmup_seconds(self) -> float:
        return self.duration * 0.1 if self.warmup is None else self.warmup

    @property
    def gap_seconds(self) -> float:
        if self.gap is not None:
            return self.gap
        return min(self.recovery + 20.0, max(2.0, self.duration * 0.05))


@dataclass
class Database:
    dsn: str
    pgdata: Path | None  # the soak's own server's data directory; None for --database-url
    kind: str


@contextlib.asynccontextmanager
async def database(options: Options, workdir: Path) -> AsyncIterator[Database]:
    """The soak's own embedded server, or a new database on ``--database-url``'s server."""
    if options.database_url is None:
        from pin_sessions.platform.embedded import EmbeddedPostgres, private_runtime_dir

        os.environ.setdefault("XDG_RUNTIME_DIR", str(private_runtime_dir()))
        embedded = EmbeddedPostgres(workdir / "pg", delete_on_stop=True)
        try:
            dsn = await asyncio.to_thread(embedded.start)
            yield Database(dsn, embedded.pgdata, "embedded (the soak's own)")
        finally:
            await asyncio.to_thread(embedded.stop)
        return
    name = f"pin_soak_{uuid.uuid4().hex[:12]}"
    admin = options.database_url
    await _admin(admin, f'create database "{name}"')
    try:
        parts = urlsplit(admin)
        yield Database(urlunsplit(parts._replace(path=f"/{name}")), None, f"external ({name})")
    finally:
        await _admin(admin, f'drop database if exists "{name}" with (force)')


async def _admin(dsn: str, statement: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(statement)
    finally:
        await conn.close()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _cli(env: dict[str, str], *args: str) -> Any:
    """A one-shot ``pin-sessions`` command; its JSON answer."""
    done = subprocess.run(
        [sys.executable, "-m", "pin_sessions", *args],
        env=env, cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"pin-sessions {' '.join(args[:2])}: {done.stderr[-1000:]}")
    return json.loads(done.stdout.splitlines()[0])


def role_env(options: Options, dsn: str, workdir: Path, sms: SmsGateway) -> dict[str, str]:
    base = {key: os.environ[key] for key in ("PATH", "HOME", "LANG") if key in os.environ}
    return {
        **base,
        "PIN_DATABASE_URL": dsn,
        "PIN_DATA_DIR": str(workdir / "data"),
        "PIN_SECRET_KEY": SECRET_KEY,
        "PIN_LOG_FORMAT": "json",
        "PIN_ACTIVITY_CLOSER__INACTIVITY_THRESHOLD": str(options.closer_threshold),
        "PIN_ACTIVITY_CLOSER__POLLING_INTERVAL": "1",
        "PIN_EXPIRE_SESSIONS__POLLING_INTERVAL": "5",
        "PIN_SESSION_RETENTION__POLLING_INTERVAL": "10",
        "PIN_ACTIVITY_RETENTION__POLLING_INTERVAL": "10",
        "PIN_SIGNING_KEYS__POLLING_INTERVAL": "5",
        # Every caller is 127.0.0.1: the per-address and global sign-in limits would stop
        # the run (their own tests prove them).
        "PIN_SIGN_IN__PER_IP_LIMIT": "100000000",
        "PIN_SIGN_IN__GLOBAL_LIMIT": "100000000",
        **sms.settings(),
    }


def start_fleet(options: Options, env: dict[str, str], logs: Path, api_port: int) -> Fleet:
    fleet = Fleet()
    commands: list[tuple[str, list[str], bool]] = [
        ("api", ["serve", "--port", str(api_port), "--workers", "2"], False),
        *((job, ["job", job], True) for job in JOBS),
        *((consumer, ["consume", consumer], True) for consumer in CONSUMERS),
    ]
    if options.bus == "kafka":
        commands.append(("relay", ["relay"], True))
    for name, args, metrics in commands:
        log = (logs / f"{name}.log").open("a")
        role = fleet.add(Role(name, args, env, log, _free_port() if metrics else None))
        role.start()
    return fleet


async def _until_ready(fleet: Fleet, api_url: str, within: float = 180.0) -> None:
    async def api_ready() -> bool:
        try:
            async with httpx.AsyncClient() as client:
                return (await client.get(f"{api_url}/readyz", timeout=2)).status_code == 200
        except httpx.HTTPError:
            return False

    deadline = asyncio.get_running_loop().time() + within
    while True:
        dead = fleet.dead()
        if dead:
            raise RuntimeError(f"roles exited at start: {dead} (their logs are in logs/)")
        others = [role for role in fleet.roles if role.metrics_port is not None]
        ready = await asyncio.gather(*(asyncio.to_thread(role.ready) for role in others))
        if all(ready) and await api_ready():
            return
        if asyncio.get_running_loop().time() > deadline:
            raise RuntimeError("the roles did not become ready in time")
        await asyncio.sleep(0.5)


def _machine_cpu() -> list[int]:
    with open("/proc/stat") as stat:
        return [int(ticks) for ticks in stat.readline().split()[1:9]]


def _cpu_shares(before: list[int], after: list[int]) -> dict[str, float]:
    spent = dict(zip(CPU_KINDS, (b - a for a, b in zip(before, after, strict=True)), strict=True))
    total = max(sum(spent.values()), 1)
    busy = sum(spent[kind] for kind in ("user", "nice", "system", "irq", "softirq"))
    return {
        "busy": round(busy / total, 3),
        "idle": round((spent["idle"] + spent["iowait"]) / total, 3),
        "steal": round(spent["steal"] / total, 3),
    }


def _driver_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class Meter:
    """CPU of the machine, the driver, the API and PostgreSQL over the traffic."""

    def __init__(self, fleet: Fleet, db: Database) -> None:
        self.fleet = fleet
        self.db = db

    def _postgres(self) -> list[psutil.Process]:
        from soak_processes import postmaster_pid

        pid = None if self.db.pgdata is None else postmaster_pid(self.db.pgdata)
        return [] if pid is None else process_tree(pid)

    def snapshot(self) -> dict[str, Any]:
        api = process_tree(self.fleet.named("api").pid)
        others = [p for r in self.fleet.roles if r.name != "api" for p in process_tree(r.pid)]
        return {
            "machine": _machine_cpu(),
            "driver": _driver_cpu(),
            "api": cpu_seconds(api),
            "postgres": cpu_seconds(self._postgres()),
            "workers": cpu_seconds(others),
        }

    @staticmethod
    def between(before: dict[str, Any], after: dict[str, Any], seconds: float, calls: int) -> Any:
        def spent(key: str) -> float:
            return round(float(after[key] - before[key]), 2)

        return {
            "cores": os.cpu_count(),
            "cpuShares": _cpu_shares(before["machine"], after["machine"]),
            "driverCpuSeconds": spent("driver"),
            "driverCpuMsPerCall": round(spent("driver") * 1000 / max(calls, 1), 3),
            "driverShareOfOneCore": round(spent("driver") / max(seconds, 1e-9), 3),
            "apiCpuSeconds": spent("api"),
            "postgresCpuSeconds": spent("postgres") if before["postgres"] else None,
            "otherRolesCpuSeconds": spent("workers"),
            "note": "CPU of processes killed by a fault is lost from these sums",
        }


async def run(options: Options) -> dict[str, Any]:
    assert options.workdir is not None
    workdir = options.workdir
    logs = workdir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    async with database(options, workdir) as db:
        return await _run_on(options, db, workdir, logs)


async def _run_on(options: Options, db: Database, workdir: Path, logs: Path) -> dict[str, Any]:
    sms = SmsGateway()
    await sms.start()
    env = role_env(options, db.dsn, workdir, sms)
    await asyncio.to_thread(_cli, env, "migrate")
    await install_ledger(db.dsn)
    client = await asyncio.to_thread(
        _cli, env, "clients", "create", "--name", "soak-service", "--scope",
        "user-activity.internal",
    )  # fmt: skip
    await asyncio.to_thread(
        _cli, env, "users", "grant", "--phone", VIEWER_PHONE, "--permission", "dev-stats.view"
    )
    broker = _start_broker() if options.bus == "kafka" else None
    if broker is not None:
        env |= broker.env()
    api_port = _free_port()
    fleet = start_fleet(options, env, logs, api_port)
    try:
        await _until_ready(fleet, f"http://127.0.0.1:{api_port}")
        async with _traffic(options, fleet, db, env, logs, sms, api_port, client, broker) as out:
            pass
        settled = await settle(db.dsn, within=SETTLE_SECONDS + options.closer_threshold)
        books = await _reconciled(
            db.dsn,
            acknowledged=out["acknowledged"],
            refresh_owner=out["refreshOwner"],
            erased_ids=out["erasures"].user_ids,
            erased_phones=out["erasures"].phones,
            double_active_seen=out["doubleActive"],
            settled=settled,
        )
    finally:
        fleet.stop_all()
        sms.stop()
        if broker is not None:
            broker.stop()
    return _report(options, db, out, books, settled)


async def _reconciled(dsn: str, **given: Any) -> dict[str, Any]:
    """The books; a reconciliation that itself fails is reported as such, not lost."""
    try:
        return await reconcile(dsn, **given)
    except Exception as exc:
        return {"reconciliation": {"holds": False, "error": repr(exc)}}


def _start_broker() -> KafkaCluster:
    """Three Apache Kafka nodes (KRaft), topics replicated on all three: a cluster that
    keeps serving with one broker killed, as production's does."""
    from tests.support.kafka import KafkaCluster

    broker = KafkaCluster(3)
    try:
        broker.start()
    except BaseException:
        broker.stop()
        raise
    return broker


@contextlib.asynccontextmanager
async def _traffic(
    options: Options, fleet: Fleet, db: Database, env: dict[str, str], logs: Path,
    sms: SmsGateway, api_port: int, client: dict[str, Any], broker: KafkaCluster | None,
) -> AsyncIterator[dict[str, Any]]:  # fmt: skip
    """Drive the traffic and the faults; yields what the report and the books need."""
    recorder = Recorder()
    connections = min(1024, max(64, int(options.rate * 8)))
    wire = Wire(
        "127.0.0.1", api_port, recorder, connections=connections, timeout=options.call_timeout
    )
    plan = Plan(options.duration, options.devices, options.rate,
                closer_threshold=options.closer_threshold, ramp=options.warmup_seconds)  # fmt: skip
    world = World(wire, sms, recorder, plan, random.Random(options.seed))
    erasures = Erasures()
    faults = Faults(
        world, fleet, env=env, pgdata=db.pgdata, broker=broker, pause=options.pause,
        gap=options.gap_seconds, serve_log=logs / "api.log", dsn=db.dsn,
    )  # fmt: skip
    meter = Meter(fleet, db)
    double_active = [0]
    unexpected_exits: list[str] = []
    before = meter.snapshot()
    service = ServiceClient(client["clientId"], client["clientSecret"])
    tasks = [
        asyncio.create_task(population(world)),
        asyncio.create_task(service_loop(world, service)),
        asyncio.create_task(viewer_loop(world, VIEWER_PHONE)),
        asyncio.create_task(erasure_loop(world, erasures, options.erasures, env, logs / "cli.log")),
        asyncio.create_task(_watch(world, fleet, db, double_active, unexpected_exits)),
    ]
    schedule = {"default": DEFAULT, "all": ALL}.get(options.faults, ())
    failures: list[str] = []
    try:
        await faults.run(schedule, first_at=options.warmup_seconds, until=options.duration)
    except Exception as exc:
        failures.append(f"fault schedule stopped: {exc}")
    last_end = max((w.end for w in faults.windows), default=0.0)
    await asyncio.sleep(max(options.duration, last_end + TAIL_SECONDS) - recorder.now())
    world.stopping.set()
    seconds = recorder.now()
    done, pending = await asyncio.wait(tasks, timeout=options.call_timeout * 4)
    for task in pending:
        task.cancel()
    for task in done:
        if not task.cancelled() and task.exception() is not None:
            failures.append(f"driver task failed: {task.exception()!r}")
    after = meter.snapshot()
    await wire.close()
    ledger = world.ledger
    yield {
        "recorder": recorder,
        "windows": faults.windows,
        "trafficSeconds": seconds,
        "machine": Meter.between(before, after, seconds, len(recorder.records)),
        "acknowledged": {
            "sessions": ledger.sessions,
            "actions": ledger.actions,
            "views": ledger.views,
            "endedViews": ledger.ended_views,
            "refusedViewEnds": ledger.refused_view_ends,
            "users": ledger.users,
            "refreshSessions": set(ledger.refresh_sessions),
            "erasures": erasures.confirmed,
        },
        "refreshOwner": ledger.refresh_sessions,
        "erasures": erasures,
        "ledger": ledger,
        "doubleActive": double_active[0],
        "failures": failures + unexpected_exits + erasures.cli_failures,
        "sms": {"received": sms.received, "refused": sms.refused},
    }


async def _watch(
    world: World, fleet: Fleet, db: Database, double_active: list[int], exits: list[str]
) -> None:
    """Every 2 s: devices with two Active sessions (INV-SES-001), roles that died unasked."""
    while not world.stopping.is_set():
        await asyncio.sleep(2.0)
        with contextlib.suppress(OSError, asyncpg.PostgresError, TimeoutError):
            double_active[0] = max(double_active[0], await count_double_active(db.dsn))
        for role in fleet.roles:
            if role.process is not None and not role.alive() and not role.faulted:
                exits.append(f"{role.name} exited by itself with {role.process.returncode}")
                role.start()


def _report(
    options: Options, db: Database, out: dict[str, Any], books: dict[str, Any],
    settled: dict[str, Any],
) -> dict[str, Any]:  # fmt: skip
    records = out["recorder"].records
    judged = evaluate(
        records,
        out["windows"],
        recovery=options.recovery,
        budget_scale=options.budget_scale,
        warmup=options.warmup_seconds,
        lags=out["recorder"].lags,
    )
    ledger = out["ledger"]
    erasures: Erasures = out["erasures"]
    heartbeats = sum(1 for record in records if record.route == "heartbeat")
    ok = (
        all(v["holds"] for v in judged["slo"].values())
        and all(v["holds"] for v in books.values())
        and not out["failures"]
    )
    report = {
        "ok": ok,
        "run": {
            "bus": options.bus,
            "devices": options.devices,
            "rate": options.rate,
            "durationSeconds": options.duration,
            "trafficSeconds": round(out["trafficSeconds"], 1),
            "faults": options.faults,
            "database": db.kind,
            "seed": options.seed,
            "closerThresholdSeconds": options.closer_threshold,
            "recoverySeconds": options.recovery,
            "warmUpSeconds": options.warmup_seconds,
            "budgetScale": options.budget_scale,
            "callTimeoutSeconds": options.call_timeout,
            "calls": len(records),
            "heartbeatsPerSecond": round(heartbeats / max(out["trafficSeconds"], 1e-9), 1),
            "faultGapSeconds": options.gap_seconds,
            "driverLagP99Ms": judged["driverLag"]["p99Ms"],
            "driverLagP99MsOutsideWindows": judged["driverLag"]["outsideWindowsP99Ms"],
            "reportFile": str(options.report) if options.report else None,
        },
        "slo": judged["slo"],
        "books": books,
        "failures": out["failures"],
        "machine": out["machine"],
        "scenario": {
            "signIns": ledger.sign_ins,
            "links": ledger.links,
            "userSwitches": ledger.switches,
            "restartedSessionsSeen": ledger.restarts_seen,
            "refreshesGivenUp": ledger.refreshes_given_up,
            "idempotentRepeatsSame": ledger.repeats_same,
            "idempotentRepeatsDifferent": ledger.repeats_different,
            "idempotentRepeatsRefused": ledger.repeats_refused,
            "erasuresByRoute": erasures.by_route,
            "erasuresByCli": erasures.by_cli,
            "sms": out["sms"],
            "settling": settled,
        },
        "routes": judged["routes"],
        "windows": judged["windows"],
        "timeline": timeline(records, step=2.0),
    }
    if ledger.repeats_different:
        report["ok"] = False
        report["failures"].append(f"{ledger.repeats_different} idempotent repeats answered anew")
    if options.report is not None:
        options.report.write_text(json.dumps(report, indent=2, default=str))
    if options.plot is not None:
        from soak_plot import draw

        draw(report, options.plot)
    return report

"""Event pipeline benchmark: session-ended outbox write → dev-stats fact, on both buses.

    python bench/pipeline.py [--rate 500] [--duration 20] [--backlog 10000] [--brokers 1]

For each bus (the built-in PostgreSQL bus, then Kafka through the relay):

* sustained: session-ended events are written to the outbox at ``--rate`` per second for
  ``--duration`` seconds, each in a short transaction as the activity closer would; the lag
  is from each write's commit to its fact's commit in ``dev_stats.session_facts``
  (p50, p99), and the throughput is facts per second over the whole run;
* drain: ``--backlog`` events are written first, then the roles start; events per second
  until the last fact is in (relay and consumer at full speed).

The roles are the production ones (``PostgresBusConsumer`` / ``OutboxRelay`` +
``KafkaConsumer`` around ``SessionEndedConsumer``), in this process. PostgreSQL is an
embedded server in a temporary directory, Kafka an Apache Kafka 4.x cluster in KRaft mode
(``tests/support/kafka.py``: ``--brokers`` nodes, 512 MB heap each, topics replicated on
min(brokers, 3) of them with ``min.insync.replicas`` one less, at least 1); all share this
machine's cores. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.kafka import BENCH_JVM_OPTIONS, KafkaCluster
from tests.support.postgres import DatabaseFactory, test_server

from pin_sessions.dev_stats.consumers import SessionEndedConsumer
from pin_sessions.platform.clock import SystemClock
from pin_sessions.platform.database import Database
from pin_sessions.platform.logging import configure_logging
from pin_sessions.platform.messaging.kafka import KafkaConsumer
from pin_sessions.platform.messaging.kafka_admin import TopicPolicy
from pin_sessions.platform.messaging.metrics import MessagingMetrics
from pin_sessions.platform.messaging.pgbus import PostgresBusConsumer
from pin_sessions.platform.messaging.relay import OutboxRelay
from pin_sessions.platform.messaging.runner import ConsumerRunner
from pin_sessions.platform.metrics import new_registry
from pin_sessions.platform.outbox import IntegrationEvent, append_all
from pin_sessions.platform.process import Role
from pin_sessions.user_activity.domain import EndedSession
from pin_sessions.user_activity.events import session_ended

TICK_SECONDS = 0.01


def _event(now: datetime) -> IntegrationEvent:
    """A session-ended event exactly as user-activity writes it."""
    return session_ended(
        EndedSession(
            id=uuid.uuid4(),
            anonymous_id=uuid.uuid4(),
            user_id=None,
            created_at=now - timedelta(minutes=20),
            last_activity_at=now - timedelta(minutes=15),
            duration=timedelta(minutes=5),
        )
    )


def _roles(bus: str, database: Database, broker: KafkaCluster) -> list[Role]:
    clock, metrics = SystemClock(), MessagingMetrics.register(new_registry())
    runner = ConsumerRunner(SessionEndedConsumer(), database, clock, metrics)
    if bus == "postgres":
        return [PostgresBusConsumer(runner, database, clock, metrics, batch_size=500)]
    replicas = broker.replication_factor
    policy = TopicPolicy(replicas)
    return [
        OutboxRelay(database, clock, metrics, broker.bootstrap, topic_policy=policy),
        KafkaConsumer(
            runner,
            broker.bootstrap,
            metrics,
            batch_size=500,
            session_timeout_ms=6000,
            topic_policy=policy,
        ),
    ]


async def _write(database: Database, count: int) -> dict[uuid.UUID, datetime]:
    async with database.transaction() as conn:
        events = [_event(datetime.now(UTC)) for _ in range(count)]
        await append_all(conn, events, now=datetime.now(UTC))
    committed = datetime.now(UTC)
    return {event.aggregate_id: committed for event in events}


async def _facts(database: Database) -> dict[uuid.UUID, datetime]:
    async with database.connection() as conn:
        rows = await conn.fetch("select session_id, recorded_at from dev_stats.session_facts")
    return {row["session_id"]: row["recorded_at"] for row in rows}


async def _count(database: Database) -> int:
    async with database.connection() as conn:
        count: int = await conn.fetchval("select count(*) from dev_stats.session_facts")
    return count


async def _wait_for(database: Database, total: int, within: float) -> None:
    deadline = time.monotonic() + within
    while await _count(database) < total:
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {await _count(database)} of {total} facts arrived")
        await asyncio.sleep(0.05)


async def _warm_up(database: Database) -> None:
    """One event through first, so group joins and topic creation are not measured."""
    await _write(database, 1)
    await _wait_for(database, 1, within=120)


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


async def _sustained(database: Database, rate: float, duration: float) -> dict[str, Any]:
    written: dict[uuid.UUID, datetime] = {}
    per_tick, started = rate * TICK_SECONDS, time.monotonic()
    ticks = int(duration / TICK_SECONDS)
    debt = 0.0
    for tick in range(ticks):
        debt += per_tick
        batch, debt = int(debt), debt - int(debt)
        if batch:
            written |= await _write(database, batch)
        await asyncio.sleep(max(0.0, started + (tick + 1) * TICK_SECONDS - time.monotonic()))
    first_write = min(written.values())
    await _wait_for(database, len(written) + 1, within=300)
    facts = await _facts(database)
    lags = [(facts[sid] - at).total_seconds() * 1000 for sid, at in written.items()]
    last_fact = max(facts[sid] for sid in written)
    return {
        "events": len(written),
        "writtenPerSecond": round(len(written) / duration, 1),
        "lagP50Ms": round(_percentile(lags, 0.50), 1),
        "lagP99Ms": round(_percentile(lags, 0.99), 1),
        "lagMaxMs": round(max(lags), 1),
        "eventsPerSecond": round(len(written) / (last_fact - first_write).total_seconds(), 1),
    }


def _machine_cpu() -> list[int]:
    """The machine's CPU time so far by kind (/proc/stat's first line: user nice system idle
    iowait irq softirq steal), as bench/heartbeat.py reads it."""
    with open("/proc/stat") as stat:
        return [int(ticks) for ticks in stat.readline().split()[1:9]]


def _cpu_shares(before: list[int], after: list[int]) -> dict[str, float]:
    """How the cores' time went between two readings: busy, idle, or stolen by the host."""
    spent = [b - a for a, b in zip(before, after, strict=True)]
    total = max(sum(spent), 1)
    return {
        "busy": round((spent[0] + spent[1] + spent[2] + spent[5] + spent[6]) / total, 3),
        "idle": round((spent[3] + spent[4]) / total, 3),
        "steal": round(spent[7] / total, 3),
    }


def _cpu_seconds(processes: list[psutil.Process]) -> float:
    total = 0.0
    for process in processes:
        with contextlib.suppress(psutil.NoSuchProcess):
            times = process.cpu_times()
            total += times.user + times.system
    return total


def _sides(broker: KafkaCluster, pgdata: Path) -> dict[str, list[psutil.Process]]:
    """Who does the delivery's work: the roles (this process), PostgreSQL, the broker."""
    pidfile = pgdata / "postmaster.pid"
    if pidfile.exists():  # the embedded server: it and its backends
        postmaster = psutil.Process(int(pidfile.read_text().split()[0]))
        postgres = [postmaster, *postmaster.children(recursive=True)]
    else:  # PIN_TEST_DATABASE_URL: every PostgreSQL process of this machine
        postgres = [p for p in psutil.process_iter(["name"]) if p.info["name"] == "postgres"]
    return {"roles": [psutil.Process()], "postgres": postgres, "broker": broker.processes()}


async def _bus_run(bus: str, dsn: str, broker: KafkaCluster, args: argparse.Namespace) -> Any:
    database = Database(dsn, max_size=10)
    await database.open()
    stop, tasks = asyncio.Event(), []
    try:
        await _write(database, args.backlog)  # the drain's backlog, before any role runs
        sides = _sides(broker, args.pgdata)
        cpu_before = {side: _cpu_seconds(processes) for side, processes in sides.items()}
        cores_before = _machine_cpu()
        began = time.monotonic()
        tasks = [asyncio.create_task(role.run(stop)) for role in _roles(bus, database, broker)]
        await _wait_for(database, args.backlog, within=600)
        drain: dict[str, Any] = {
            "events": args.backlog,
            "seconds": round(time.monotonic() - began, 2),
        }
        drain["eventsPerSecond"] = round(args.backlog / drain["seconds"], 1)
        # CPU per delivered event, each side's user + system time over the drain (the
        # broker works only on the Kafka path; the waiting loop above is in "roles" too).
        drain["cpuUsPerEvent"] = {
            side: round((_cpu_seconds(processes) - cpu_before[side]) / args.backlog * 1e6, 1)
            for side, processes in sides.items()
        }
        async with database.connection() as conn:
            await conn.execute("truncate dev_stats.session_facts")
        drain["cores"] = _cpu_shares(cores_before, _machine_cpu())
        await _warm_up(database)
        cores_before = _machine_cpu()
        sustained = await _sustained(database, args.rate, args.duration)
        sustained["cores"] = _cpu_shares(cores_before, _machine_cpu())
        return {"sustained": sustained, "drain": drain}
    finally:
        stop.set()
        await asyncio.gather(*tasks)
        await database.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rate", type=float, default=500.0)
    parser.add_argument("--duration", type=float, default=20.0)
    parser.add_argument("--backlog", type=int, default=10_000)
    parser.add_argument("--brokers", type=int, default=1, choices=(1, 3))
    args = parser.parse_args()
    configure_logging("warning")  # JSON lines on stderr; the result alone on stdout
    results: dict[str, Any] = {
        "rate": args.rate,
        "durationSeconds": args.duration,
        "brokers": args.brokers,
    }
    with (
        tempfile.TemporaryDirectory() as workdir,
        test_server(Path(workdir), settings={}) as admin_dsn,
    ):
        args.pgdata = Path(workdir) / "pg"
        databases = DatabaseFactory(admin_dsn)
        databases.prepare_template()
        broker = KafkaCluster(args.brokers, jvm_options=BENCH_JVM_OPTIONS)
        try:
            broker.start()
            results["brokerStartSeconds"] = round(broker.started_in or 0.0, 1)
            for bus in ("postgres", "kafka"):
                dsn = databases.create()
                try:
                    results[bus] = asyncio.run(_bus_run(bus, dsn, broker, args))
                finally:
                    databases.drop(dsn)
        finally:
            broker.stop()
            databases.close()
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()

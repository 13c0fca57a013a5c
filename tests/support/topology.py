"""The deployed topology on one machine, under traffic and faults, then reconciled.

One PostgreSQL, for Kafka a three-node Apache Kafka cluster (every topic on three replicas,
``min.insync.replicas`` 2), and two OS processes of every role, started as
``deploy/compose.yaml`` starts them (``pin-sessions serve``, ``job expire-sessions``, ``job
activity-closer``, ``relay``, ``consume NAME``) with short thresholds and intervals. Loopback
clients drive devices through both APIs for a bounded time while one process of each role is
killed with SIGKILL and started again, and then the brokers fail: the leader of a
session-ended partition is killed (SIGKILL), a few seconds later a second node, which leaves
the partitions short of their in-sync minimum (and the controllers of their quorum) for a
while; then both start again. Afterwards the books must balance:

* every session some response named with a 2xx exists;
* every session ends Inactive, flipped once (a trigger of the test records every status
  change of ``user_activity.sessions`` and ``identity.refresh_sessions``), and the
  expired refresh sessions seeded beforehand are flipped once each, by two racing jobs;
* every event written to the outbox (a trigger keeps a ledger, since delivered rows are
  deleted) was applied by its consumer, Kafka's topics hold every one of them, and there
  is exactly one dev-stats fact per closed session, each from that session's only
  session-ended event;
* on Kafka, the outage and the recovery show in the relays' metrics and logs (publish
  failures, failed passes, then a pass that succeeded again) and in the session-ended
  consumers' logs (client errors, then records received again).

The triggers and tables of the test live in ``public``: the service never sees them.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import re
import signal
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import asyncpg
import httpx
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from confluent_kafka.admin import ConfigResource  # type: ignore[attr-defined]

from tests.conftest import TEST_SECRET_KEY
from tests.support.kafka import KafkaCluster
from tests.support.processes import free_port, pin_sessions, wait_until_ready
from tests.support.waiting import wait_until, wait_until_sync

SIGN_INS = "pin.identity.sign-ins.v1"
SESSION_ENDED = "pin.user-activity.session-ended.v1"
CONSUMERS = {SIGN_INS: "identity-signed-in", SESSION_ENDED: "dev-stats-session-ended"}

AUDIT = """
create table public.topology_outbox (
    message_id uuid not null, topic text not null, aggregate_id text not null,
    created_at timestamptz not null
);
create function public.topology_outbox_audit() returns trigger language plpgsql as $$
begin
    insert into public.topology_outbox values
        (new.message_id, new.topic, new.aggregate_id, new.created_at);
    return new;
end $$;
create trigger topology_outbox_audit after insert on messaging.outbox
    for each row execute function public.topology_outbox_audit();

create table public.topology_flips (
    tbl text not null, id uuid not null, old_status text not null, new_status text not null
);
create function public.topology_flip_audit() returns trigger language plpgsql as $$
begin
    if old.status is distinct from new.status then
        insert into public.topology_flips values (tg_table_name, new.id, old.status, new.status);
    end if;
    return new;
end $$;
create trigger topology_flip_audit after update on identity.refresh_sessions
    for each row execute function public.topology_flip_audit();
create trigger topology_flip_audit after update on user_activity.sessions
    for each row execute function public.topology_flip_audit();
"""

SEED_EXPIRED = """
with owner as (
    insert into identity.users (id, phone_number, created_at)
    values (gen_random_uuid(), '+15550000001', now() - interval '40 days')
    returning id
), ids as (select gen_random_uuid() as id from generate_series(1, $1))
insert into identity.refresh_sessions
    (id, user_id, family_id, token_hash, status, created_at, expires_at, last_used_at,
     device_user_agent)
select ids.id, owner.id, ids.id, sha256(ids.id::text::bytea), 'Active',
       now() - interval '31 days', now() - interval '1 day', now() - interval '31 days', 'seed'
from ids, owner
"""


@dataclass
class Role:
    """One OS process of the topology; ``restart`` starts the same command again."""

    name: str
    args: list[str]
    log: IO[str]
    env: dict[str, str]
    metrics_port: int | None = None
    process: subprocess.Popen[str] | None = None

    def start(self) -> None:
        args = list(self.args)
        if self.name != "api":
            self.metrics_port = free_port()
            args += ["--metrics-port", str(self.metrics_port)]
        self.process = pin_sessions(*args, env=self.env, output=self.log)

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None


@dataclass
class Traffic:
    """What the clients saw."""

    sessions: set[str] = field(default_factory=set)
    requests: int = 0
    ok: int = 0
    failed: int = 0
    sign_ins: int = 0
    failures: Counter[str] = field(default_factory=Counter)


@dataclass
class Plan:
    seconds: float = 20.0
    devices: int = 24
    sign_in_share: float = 0.2
    expired_refresh_sessions: int = 2000
    # Kafka: from the leader's kill to the second node's, then how long both stay down.
    failover_gap_seconds: float = 4.0
    broker_pause_seconds: float = 10.0
    settle_timeout: float = 150.0
    seed: int = 7


class Topology:
    """Two processes of every role on one database (and one broker, for Kafka)."""

    def __init__(
        self, database_url: str, workdir: Path, broker: KafkaCluster | None, plan: Plan
    ) -> None:
        self.database_url = database_url
        self.broker = broker
        self.plan = plan
        self.workdir = workdir
        self.api_ports = [free_port(), free_port()]
        self.env = {
            "PIN_DATABASE_URL": database_url,
            "PIN_DATA_DIR": str(workdir / "data"),
            "PIN_SECRET_KEY": TEST_SECRET_KEY,
            "PIN_DEV_CODES": "1",
            "PIN_LOG_FORMAT": "json",
            "PIN_ACTIVITY_CLOSER__INACTIVITY_THRESHOLD": "3",
            "PIN_ACTIVITY_CLOSER__POLLING_INTERVAL": "0.5",
            "PIN_ACTIVITY_CLOSER__BATCH_SIZE": "50",
            "PIN_EXPIRE_SESSIONS__POLLING_INTERVAL": "1",
            "PIN_EXPIRE_SESSIONS__BATCH_SIZE": "100",
            # Every client is 127.0.0.1: the per-address sign-in limits would stop the run.
            "PIN_SIGN_IN__PER_IP_LIMIT": "1000000",
            "PIN_SIGN_IN__GLOBAL_LIMIT": "1000000",
        }
        if broker is not None:
            self.env |= broker.env()
        self.roles: list[Role] = []
        self.kills: list[str] = []
        self.broker_kills: list[int] = []

    @contextlib.contextmanager
    def running(self) -> Iterator[Topology]:
        logs = self.workdir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        commands: list[tuple[str, list[str]]] = [
            *(("api", ["serve", "--port", str(port)]) for port in self.api_ports),
            *(("expire-sessions", ["job", "expire-sessions"]) for _ in range(2)),
            *(("activity-closer", ["job", "activity-closer"]) for _ in range(2)),
            *(
                (consumer, ["consume", consumer])
                for consumer in CONSUMERS.values()
                for _ in range(2)
            ),
        ]
        if self.broker is not None:
            commands += [("relay", ["relay"]), ("relay", ["relay"])]
        with contextlib.ExitStack() as stack:
            for index, (name, args) in enumerate(commands):
                log = stack.enter_context((logs / f"{index:02d}-{name}.log").open("a"))
                self.roles.append(Role(name, args, log, self.env))
            try:
                for role in self.roles:
                    role.start()
                for port, role in zip(self.api_ports, self.roles, strict=False):
                    assert role.process is not None
                    wait_until_ready(f"http://127.0.0.1:{port}", role.process, timeout=120)
                yield self
            finally:
                for role in self.roles:
                    if role.alive():
                        assert role.process is not None
                        role.process.send_signal(signal.SIGTERM)
                for role in self.roles:
                    if role.process is not None:
                        try:
                            role.process.wait(timeout=30)
                        except subprocess.TimeoutExpired:
                            role.process.kill()

    async def prepare(self) -> None:
        conn = await asyncpg.connect(self.database_url)
        try:
            await conn.execute(AUDIT)
            await conn.execute(SEED_EXPIRED, self.plan.expired_refresh_sessions)
        finally:
            await conn.close()

    async def kill_one_of_each_role(self) -> None:
        """SIGKILL the first process of every role, then start each again."""
        seen: set[str] = set()
        victims = []
        for role in self.roles:
            if role.name not in seen:
                seen.add(role.name)
                victims.append(role)
        for role in victims:
            await asyncio.to_thread(role.kill)
            self.kills.append(role.name)
        await asyncio.sleep(1.0)
        for role in victims:
            role.start()

    async def fail_brokers(self) -> None:
        """Kill (SIGKILL) the leader of session-ended's partition 0, then a second node; after
        ``broker_pause_seconds`` start both again on their data, and wait for them."""
        broker = self.broker
        if broker is None:
            return
        leader = await asyncio.to_thread(broker.leader_of, SESSION_ENDED, 0)
        await asyncio.to_thread(broker.kill, leader)
        self.broker_kills.append(leader)
        await asyncio.sleep(self.plan.failover_gap_seconds)
        second = next(node.node_id for node in broker.nodes if node.alive())
        await asyncio.to_thread(broker.kill, second)
        self.broker_kills.append(second)
        await asyncio.sleep(self.plan.broker_pause_seconds)
        for node_id in self.broker_kills:
            broker.restart(node_id)  # on this thread: the node must not die with a worker
        everyone = {node.node_id for node in broker.nodes}
        await asyncio.to_thread(broker.wait_for_brokers, everyone)

    def check_alive(self) -> None:
        dead = [role.name for role in self.roles if not role.alive()]
        assert not dead, f"roles exited on their own: {dead}"


async def drive(topology: Topology) -> Traffic:
    """Devices through both APIs for ``plan.seconds``, with the faults at fixed moments."""
    plan = topology.plan
    traffic = Traffic()
    rng = random.Random(plan.seed)
    deadline = time.monotonic() + plan.seconds
    clients = [
        httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10)
        for port in topology.api_ports
    ]

    async def call(method: str, path: str, **kwargs: Any) -> httpx.Response | None:
        """One request to either API; refused by one (killed), it goes to the other, as a
        load balancer would send it."""
        traffic.requests += 1
        first = rng.randrange(len(clients))
        response = None
        for client in (clients[first], clients[1 - first]):
            try:
                response = await client.request(method, path, **kwargs)
                break
            except httpx.ConnectError:
                traffic.failures["refused, sent to the other API"] += 1
            except httpx.HTTPError as exc:
                traffic.failures[type(exc).__name__] += 1
                break
        if response is None:
            traffic.failed += 1
            return None
        if response.is_success:
            traffic.ok += 1
            if path.startswith("/api/user-activity/sessions/"):
                traffic.sessions.add(response.json()["sessionId"])
        else:
            traffic.failed += 1
            traffic.failures[f"{path.rsplit('/', 1)[-1]} {response.status_code}"] += 1
        return response

    async def sign_in(device: dict[str, str]) -> None:
        phone = "+4479" + str(rng.randrange(10**8)).zfill(8)
        asked = await call("POST", "/api/identity/sign-in/requests", json={"phoneNumber": phone})
        if asked is None or asked.status_code != 201:
            return
        request_id = asked.json()["requestId"]
        code = await call("GET", f"/dev/sign-in-codes/{request_id}")
        if code is None or code.status_code != 200:
            return
        confirmed = await call(
            "POST",
            "/api/identity/sign-in/confirm",
            json={"requestId": request_id, "code": code.json()["code"]},
            headers=device,
        )
        if confirmed is not None and confirmed.status_code == 200:
            traffic.sign_ins += 1

    async def device_loop() -> None:
        while time.monotonic() < deadline:
            device = {"X-Anonymous-Id": str(uuid.uuid4())}
            await call("POST", "/api/user-activity/sessions/start", headers=device)
            ends = min(time.monotonic() + rng.uniform(1.0, 4.0), deadline)
            signs_in = rng.random() < plan.sign_in_share
            while time.monotonic() < ends:
                await asyncio.sleep(0.5)
                await call("POST", "/api/user-activity/sessions/heartbeat", headers=device)
                if signs_in:
                    signs_in = False
                    await sign_in(device)

    async def faults() -> None:
        await asyncio.sleep(plan.seconds * 0.25)
        await topology.kill_one_of_each_role()
        await topology.fail_brokers()

    try:
        fault_task = asyncio.create_task(faults())
        await asyncio.gather(*(device_loop() for _ in range(plan.devices)))
        await fault_task
    finally:
        for client in clients:
            await client.aclose()
    return traffic


SETTLED = """
select
    (select count(*) from user_activity.sessions where status = 'Active') as active,
    (select count(*) from user_activity.sessions where status = 'Inactive') as inactive,
    (select count(*) from dev_stats.session_facts) as facts,
    (select count(*) from public.topology_outbox o
      where not exists (
        select 1 from messaging.processed_messages p
        where p.message_id = o.message_id and p.consumer = case o.topic
            when $1 then 'identity-signed-in' when $2 then 'dev-stats-session-ended' end)
        and o.topic in ($1, $2)) as unapplied
"""


async def settle(topology: Topology) -> None:
    """Until every session is closed and every event applied by its consumer."""

    last: dict[str, int] = {}

    async def settled() -> bool:
        topology.check_alive()
        conn = await asyncpg.connect(topology.database_url)
        try:
            row = await conn.fetchrow(SETTLED, SIGN_INS, SESSION_ENDED)
        finally:
            await conn.close()
        assert row is not None
        last.update(row)
        return bool(
            row["active"] == 0 and row["unapplied"] == 0 and row["facts"] == row["inactive"]
        )

    try:
        await wait_until(settled, timeout=topology.plan.settle_timeout, interval=0.5)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; still: {last}") from None


def read_topics(bootstrap: str, topics: list[str]) -> Counter[tuple[str, str]]:
    """Every record of ``topics`` from the beginning: (topic, MessageId) → copies."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"topology-audit-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
        }
    )
    copies: Counter[tuple[str, str]] = Counter()
    try:
        metadata = consumer.list_topics(timeout=10)
        partitions = [
            TopicPartition(topic, partition, OFFSET_BEGINNING)
            for topic in topics
            for partition in metadata.topics[topic].partitions
        ]
        ends = {
            (tp.topic, tp.partition): consumer.get_watermark_offsets(tp, timeout=10)[1]
            for tp in partitions
        }
        remaining = {key for key, end in ends.items() if end > 0}
        consumer.assign(partitions)

        def read_to_the_end() -> bool:
            for record in consumer.consume(500, 1.0):
                if record.error() is not None:
                    continue
                topic, partition, offset = record.topic(), record.partition(), record.offset()
                assert topic is not None and partition is not None and offset is not None
                headers = dict(record.headers() or [])
                message_id = headers["MessageId"]
                assert isinstance(message_id, bytes)
                copies[(topic, message_id.decode())] += 1
                if offset + 1 >= ends[(topic, partition)]:
                    remaining.discard((topic, partition))
            return not remaining

        try:
            wait_until_sync(read_to_the_end, timeout=60, interval=0)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; partitions not read to their end: {remaining}") from None
    finally:
        consumer.close()
    return copies


def _metric_sum(text: str, name: str) -> float:
    return sum(float(value) for value in re.findall(rf"^{name}\{{[^}}]*\}} (\S+)$", text, re.M))


def scrape(topology: Topology, roles: set[str], metric: str) -> float:
    """``metric`` summed over the processes of ``roles`` alive at the end (a killed one's
    count is lost with it)."""
    total = 0.0
    for role in topology.roles:
        if role.name in roles and role.metrics_port is not None:
            with contextlib.suppress(httpx.HTTPError):
                text = httpx.get(f"http://127.0.0.1:{role.metrics_port}/metrics", timeout=5).text
                total += _metric_sum(text, metric)
    return total


def scrape_duplicates(topology: Topology) -> float:
    """Redeliveries the consumers alive at the end absorbed."""
    return scrape(topology, set(CONSUMERS.values()), "pin_consumer_duplicates_total")


def _log_events(topology: Topology, role: str) -> list[list[str]]:
    """The ``event`` of every JSON log line, per process log of ``role`` (in file order)."""
    logs = []
    for path in sorted((topology.workdir / "logs").glob(f"*-{role}.log")):
        events = []
        for line in path.read_text(errors="replace").splitlines():
            found = re.search(r'"event": ?"([^"]*)"', line)
            if found:
                events.append(found.group(1))
        logs.append(events)
    return logs


def _one_after_the_other(logs: list[list[str]], first: str, then: str) -> bool:
    return any(first in events and then in events[events.index(first) :] for events in logs)


def kafka_outage(topology: Topology) -> dict[str, Any]:
    """The brokers' failure as the roles saw it; asserts it shows, and the recovery after."""
    broker = topology.broker
    assert broker is not None
    relay_logs = _log_events(topology, "relay")
    consumer_logs = _log_events(topology, CONSUMERS[SESSION_ENDED])
    failed = scrape(topology, {"relay"}, "pin_outbox_publish_failed_total")
    assert failed > 0, "the relays counted no publish failure during the outage"
    assert _one_after_the_other(relay_logs, "pass failed, retrying", "pass succeeded again")
    assert _one_after_the_other(consumer_logs, "kafka client error", "consumer receiving again")
    admin = broker.admin()
    [config] = admin.describe_configs([ConfigResource("topic", SESSION_ENDED)]).values()
    topic = broker.admin().list_topics(SESSION_ENDED, timeout=10).topics[SESSION_ENDED]
    replicas = {len(partition.replicas) for partition in topic.partitions.values()}
    min_insync = int(config.result(timeout=30)["min.insync.replicas"].value)
    # PIN_KAFKA__REPLICATION_FACTOR unset: 3 on three brokers, and min.insync.replicas 2.
    assert (replicas, min_insync) == ({3}, 2)
    return {
        "brokersKilled": topology.broker_kills,
        "replicationFactor": 3,
        "minInsyncReplicas": min_insync,
        "publishFailed": failed,
        "relayFailedPasses": sum(events.count("pass failed, retrying") for events in relay_logs),
        "consumerClientErrors": sum(events.count("kafka client error") for events in consumer_logs),
    }


async def reconcile(topology: Topology, traffic: Traffic) -> dict[str, Any]:
    """The assertions of the module docstring; returns the run's summary."""
    conn = await asyncpg.connect(topology.database_url)
    try:
        sessions = {
            str(row["id"]): row["status"]
            for row in await conn.fetch("select id, status from user_activity.sessions")
        }
        flips = await conn.fetch(
            "select tbl, id, count(*) as n from public.topology_flips group by tbl, id"
        )
        ledger = await conn.fetch(
            "select message_id, topic, aggregate_id from public.topology_outbox"
        )
        facts = await conn.fetch(
            "select f.session_id, f.message_id, "
            "extract(epoch from f.recorded_at - s.ended_at) as lag "
            "from dev_stats.session_facts f join user_activity.sessions s on s.id = f.session_id"
        )
        expired = await conn.fetchval(
            "select count(*) from identity.refresh_sessions "
            "where device_user_agent = 'seed' and status = 'Expired'"
        )
    finally:
        await conn.close()

    missing = traffic.sessions - sessions.keys()
    assert not missing, f"{len(missing)} sessions answered with a 2xx do not exist"
    assert set(sessions.values()) == {"Inactive"}, Counter(sessions.values())
    flipped_twice = [(r["tbl"], r["id"]) for r in flips if r["n"] > 1]
    assert not flipped_twice, f"rows flipped twice: {flipped_twice[:5]}"
    closes = Counter(r["id"] for r in flips if r["tbl"] == "sessions")
    assert set(map(str, closes)) == sessions.keys()
    assert expired == topology.plan.expired_refresh_sessions

    ended = [r for r in ledger if r["topic"] == SESSION_ENDED]
    ended_per_session = Counter(r["aggregate_id"] for r in ended)
    assert set(ended_per_session) == sessions.keys()
    assert max(ended_per_session.values()) == 1, "a session ended twice"
    ended_ids = {r["message_id"] for r in ended}
    assert len(facts) == len(sessions)
    assert {r["message_id"] for r in facts} == ended_ids

    summary: dict[str, Any] = {
        "bus": "kafka" if topology.broker is not None else "postgres",
        "seconds": topology.plan.seconds,
        "requests": traffic.requests,
        "requestsOk": traffic.ok,
        "requestsFailed": traffic.failed,
        "failures": dict(traffic.failures),
        "sessions": len(sessions),
        "signIns": traffic.sign_ins,
        "killed": topology.kills,
        "brokersDownSeconds": topology.plan.broker_pause_seconds if topology.broker else 0,
        "events": dict(Counter(r["topic"] for r in ledger)),
        "expiredRefreshSessions": expired,
        "facts": len(facts),
        "maxLagSeconds": round(max((float(r["lag"]) for r in facts), default=0.0), 3),
        "duplicatesAbsorbed": scrape_duplicates(topology),
    }
    if topology.broker is not None:
        copies = read_topics(topology.broker.bootstrap, [SIGN_INS, SESSION_ENDED])
        written = {(r["topic"], str(r["message_id"])) for r in ledger if r["topic"] in CONSUMERS}
        lost = written - copies.keys()
        assert not lost, f"{len(lost)} events never reached their topic"
        summary["recordsOnTopics"] = sum(copies.values())
        summary["duplicatesDelivered"] = sum(copies.values()) - len(copies)
        summary["outage"] = kafka_outage(topology)
    return summary

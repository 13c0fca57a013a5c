"""The topology of ``deploy/compose.yaml`` on this machine, under traffic and faults (SPEC §9, §11).

Two processes of every role at once, one of each killed with SIGKILL and restarted
mid-run; on Kafka, three Apache Kafka nodes (topics on three replicas) of which the leader of
a session-ended partition is killed, then a second node, both down for ten seconds; then the
books must balance: every event written to the outbox reaches dev-stats exactly once (see
``tests/support/topology.py``). Once per bus. ``bench/topology.py`` runs it longer.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.kafka import KafkaCluster
from tests.support.topology import Plan, Topology, drive, reconcile, settle


@pytest.fixture
def kafka_cluster() -> Iterator[KafkaCluster]:
    """Three nodes of this test's own: two are killed, and its topics must start empty.

    The only test of the suite on three brokers: they cost three JVM starts."""
    cluster = KafkaCluster(3)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.mark.long
@pytest.mark.timeout(420)
@pytest.mark.parametrize("bus", ["postgres", "kafka"])
async def test_two_of_every_role_under_kills_and_broker_failover_lose_and_repeat_nothing(
    bus: str, database_url: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    broker = request.getfixturevalue("kafka_cluster") if bus == "kafka" else None
    topology = Topology(
        database_url,
        tmp_path,
        broker,
        Plan(seconds=10.0, devices=12, expired_refresh_sessions=1000),
    )
    await topology.prepare()
    with topology.running():
        traffic = await drive(topology)
        await settle(topology)
        summary = await reconcile(topology, traffic)
    print(json.dumps(summary))
    assert traffic.sign_ins > 0 and summary["facts"] > 0
    assert sorted(summary["killed"]) == sorted(
        {
            "api",
            "expire-sessions",
            "activity-closer",
            "identity-signed-in",
            "dev-stats-session-ended",
        }
        | ({"relay"} if bus == "kafka" else set())
    )

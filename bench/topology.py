"""The deployed topology under traffic and faults, longer than its test (tests/test_topology.py).

    flock /tmp/pin-bench.lock python bench/topology.py [--seconds 90] [--devices 40]

Two OS processes of every role (API, expire-sessions, activity-closer, relay, both
consumers) on one PostgreSQL and, for Kafka, a three-node Apache Kafka cluster (topics
replicated three times), started as ``deploy/compose.yaml`` starts them. Loopback clients
drive devices through both APIs for ``--seconds``; a quarter in, one process of each role is
killed with SIGKILL and started again, then the broker fails over: the leader of a
session-ended partition is killed (SIGKILL), a second node for ``--broker-pause`` seconds,
and both started again. Once every
session is closed and every event applied, the books are reconciled (the assertions of
``tests/support/topology.py``) and the summary printed: events, duplicates delivered
and absorbed, the longest lag from a session's close to its dev-stats fact. Once per bus.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.kafka import KafkaCluster
from tests.support.postgres import DatabaseFactory, test_server
from tests.support.topology import Plan, Topology, drive, reconcile, settle

from pin_sessions.platform.logging import configure_logging


async def _run(dsn: str, workdir: Path, broker: KafkaCluster | None, plan: Plan) -> Any:
    topology = Topology(dsn, workdir, broker, plan)
    await topology.prepare()
    with topology.running():
        traffic = await drive(topology)
        await settle(topology)
        return await reconcile(topology, traffic)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=90.0)
    parser.add_argument("--devices", type=int, default=40)
    parser.add_argument("--broker-pause", type=float, default=10.0)
    args = parser.parse_args()
    configure_logging("warning")  # JSON lines on stderr; the result alone on stdout
    plan = Plan(
        seconds=args.seconds,
        devices=args.devices,
        broker_pause_seconds=args.broker_pause,
        settle_timeout=300.0,
    )
    results: dict[str, Any] = {}
    with (
        tempfile.TemporaryDirectory() as workdir,
        test_server(Path(workdir), settings={}) as admin_dsn,
    ):
        databases = DatabaseFactory(admin_dsn)
        databases.prepare_template()
        try:
            for bus in ("postgres", "kafka"):
                dsn = databases.create()
                broker = KafkaCluster(3) if bus == "kafka" else None
                try:
                    if broker is not None:
                        broker.start()
                    results[bus] = asyncio.run(_run(dsn, Path(workdir) / bus, broker, plan))
                finally:
                    if broker is not None:
                        broker.stop()
                    databases.drop(dsn)
        finally:
            databases.close()
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()

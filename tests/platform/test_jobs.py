"""The polling worker: one pass per tick, a failed pass never ends the loop."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from prometheus_client import CollectorRegistry

from pin_sessions.platform.clock import FixedClock
from pin_sessions.platform.jobs import JobRun, PollingWorker
from tests.conftest import LogCapture


@dataclass(frozen=True)
class CountResult:
    seen: datetime
    succeeded: bool = True

    def to_json(self) -> dict[str, Any]:
        return {"seen": self.seen.isoformat()}


@dataclass
class ScriptedJob:
    """A job whose passes fail or succeed as scripted; it stops the loop when done."""

    script: list[bool]
    clock: FixedClock
    name: str = "scripted"
    metric_prefix: str = "test_scripted"
    nows: list[datetime] = field(default_factory=list)

    async def run_once(self, now: datetime, run: JobRun) -> CountResult:
        self.nows.append(now)
        self.clock.advance(timedelta(minutes=1))
        succeeds = self.script.pop(0)
        if not self.script:
            run.stop.set()
        if not succeeds:
            raise ConnectionError("database went away")
        return CountResult(now)


async def test_a_failed_pass_is_logged_and_counted_and_the_loop_goes_on(
    clock: FixedClock, registry: CollectorRegistry, captured_logs: LogCapture
) -> None:
    job = ScriptedJob([False, True, False], clock)
    worker = PollingWorker(job, clock=clock, interval=timedelta(0), registry=registry)
    start = clock.now()

    await asyncio.wait_for(worker.run(asyncio.Event()), timeout=30)

    # Three passes, each deciding with the instant read at its start.
    assert job.nows == [start + timedelta(minutes=n) for n in range(3)]
    assert registry.get_sample_value("test_scripted_failed_runs_total") == 2
    # The last success is the end of the second pass, read from the injected clock.
    assert (
        registry.get_sample_value("test_scripted_last_success_timestamp_seconds")
        == (start + timedelta(minutes=2)).timestamp()
    )
    failures = [json.loads(line) for line in captured_logs.lines() if '"job failed"' in line]
    assert failures and "database went away" in failures[-1]["exception"]


async def test_the_loop_waits_for_the_interval_unless_stopped(
    clock: FixedClock, registry: CollectorRegistry
) -> None:
    job = ScriptedJob([True, True], clock)
    worker = PollingWorker(job, clock=clock, interval=timedelta(hours=1), registry=registry)
    stop = asyncio.Event()
    loop = asyncio.create_task(worker.run(stop))
    while not job.nows:
        await asyncio.sleep(0)
    await asyncio.sleep(0.05)

    assert len(job.nows) == 1, "no second pass before the interval"
    stop.set()
    await asyncio.wait_for(loop, timeout=30)

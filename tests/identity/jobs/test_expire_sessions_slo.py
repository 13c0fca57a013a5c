"""Seed 000's SLO, observable: how late each flip was, and how overdue the oldest row left is.

``identity_expire_sessions_flip_lag_seconds{phase}`` gets one observation per flipped row
(the flip's time less its ``expires_at``); ``identity_expire_sessions_oldest_overdue_seconds
{phase}`` is the run's ``now`` less the oldest ``expires_at`` still under the guard, read as
the first entry of the phase's partial index. Times come from a FixedClock.
"""

from __future__ import annotations

import asyncio
import re
from datetime import datetime, timedelta

import pytest
from prometheus_client import CollectorRegistry

from pin_sessions.identity.repository.loaded import QUERIES
from pin_sessions.platform.clock import FixedClock
from pin_sessions.platform.queries import Query
from pin_sessions.platform.runtime import Runtime
from tests.identity.jobs.rows import insert_refresh_sessions, insert_sicr, insert_user
from tests.identity.jobs.support import expire_once, expire_sessions_worker
from tests.support.waiting import wait_until

LAG = "identity_expire_sessions_flip_lag_seconds"
OLDEST = "identity_expire_sessions_oldest_overdue_seconds"
DAY = timedelta(days=1)
# Seconds past expiry of the rows each phase starts with; one more of each is still live.
REFRESH_OVERDUE = (30, 90, 700)
SICR_OVERDUE = (10, 400)


async def _overdue_rows(runtime: Runtime) -> None:
    now = runtime.clock.now()
    async with runtime.database.connection() as conn:
        user = await insert_user(conn, now - 30 * DAY)
        for seconds in REFRESH_OVERDUE:
            await insert_refresh_sessions(
                conn,
                user,
                count=1,
                status="Active",
                created_at=now - 30 * DAY,
                expires_at=now - timedelta(seconds=seconds),
            )
        await insert_refresh_sessions(
            conn, user, count=1, status="Active", created_at=now, expires_at=now + DAY
        )
        for seconds in SICR_OVERDUE:
            await insert_sicr(
                conn,
                count=1,
                status="Pending",
                created_at=now - timedelta(minutes=20),
                expires_at=now - timedelta(seconds=seconds),
            )
        await insert_sicr(
            conn, count=1, status="Pending", created_at=now, expires_at=now + timedelta(minutes=5)
        )


def _lag(registry: CollectorRegistry, phase: str) -> dict[str, float]:
    """The phase's lag histogram: cumulative counts by upper bound, its sum and count."""
    found = {
        bound: registry.get_sample_value(f"{LAG}_bucket", {"phase": phase, "le": bound})
        for bound in ("10.0", "30.0", "60.0", "120.0", "360.0", "600.0", "900.0", "+Inf")
    }
    found["sum"] = registry.get_sample_value(f"{LAG}_sum", {"phase": phase})
    found["count"] = registry.get_sample_value(f"{LAG}_count", {"phase": phase})
    return {key: value for key, value in found.items() if value is not None}


def _oldest(registry: CollectorRegistry, phase: str) -> float | None:
    return registry.get_sample_value(OLDEST, {"phase": phase})


@pytest.mark.parametrize("batch_size", [5000, 1], ids=["one update", "chunks"])
async def test_each_flipped_row_observes_its_lag_and_nothing_is_left_overdue(
    runtime: Runtime, registry: CollectorRegistry, batch_size: int
) -> None:
    await _overdue_rows(runtime)

    result = await expire_once(runtime, registry, batch_size=batch_size)

    assert (result.count("refreshExpired"), result.count("sicrExpired")) == (3, 2)
    assert _lag(registry, "refresh") == {
        "10.0": 0, "30.0": 1, "60.0": 1, "120.0": 2, "360.0": 2, "600.0": 2, "900.0": 3,
        "+Inf": 3, "sum": 820, "count": 3,
    }  # fmt: skip
    assert _lag(registry, "sicr") == {
        "10.0": 1, "30.0": 1, "60.0": 1, "120.0": 1, "360.0": 1, "600.0": 2, "900.0": 2,
        "+Inf": 2, "sum": 410, "count": 2,
    }  # fmt: skip
    # Only the live rows are left under the guard, none of them past its expiry.
    assert (_oldest(registry, "refresh"), _oldest(registry, "sicr")) == (0, 0)


async def test_rows_left_behind_show_how_overdue_the_oldest_is_until_flipped(
    runtime: Runtime, registry: CollectorRegistry, clock: FixedClock
) -> None:
    await _overdue_rows(runtime)
    worker = expire_sessions_worker(runtime, registry)
    stop = asyncio.Event()
    stop.set()

    # Stopped before its phases: nothing flips, but what is left is measured.
    skipped = await worker.run_pass(stop)
    assert (
        skipped is not None and skipped.count("refreshExpired") + skipped.count("sicrExpired") == 0
    )
    assert (_oldest(registry, "refresh"), _oldest(registry, "sicr")) == (700, 400)
    assert _lag(registry, "refresh")["count"] == 0

    # A minute later the next run flips them, each a minute later than it would have.
    clock.advance(timedelta(minutes=1))
    done = await worker.run_pass(asyncio.Event())
    assert done is not None and done.count("refreshExpired") + done.count("sicrExpired") == 5
    assert (_oldest(registry, "refresh"), _oldest(registry, "sicr")) == (0, 0)
    assert _lag(registry, "refresh")["sum"] == sum(s + 60 for s in REFRESH_OVERDUE)
    assert _lag(registry, "sicr")["sum"] == sum(s + 60 for s in SICR_OVERDUE)


async def test_a_locked_row_the_chunks_skip_stays_overdue_in_the_gauge(
    runtime: Runtime, registry: CollectorRegistry
) -> None:
    """Chunks skip what another transaction holds; the gauge shows that row's age."""
    await _overdue_rows(runtime)
    now = runtime.clock.now()
    oldest = now - timedelta(seconds=max(REFRESH_OVERDUE))
    async with runtime.database.transaction() as holder:
        await holder.execute(
            "select 1 from identity.refresh_sessions where expires_at = $1 for update", oldest
        )
        result = await expire_once(runtime, registry, batch_size=1)

    assert (result.count("refreshExpired"), result.phases["refresh"].remaining) == (2, 1)
    assert _oldest(registry, "refresh") == max(REFRESH_OVERDUE)
    assert _lag(registry, "refresh")["sum"] == sum(sorted(REFRESH_OVERDUE)[:2])


@pytest.mark.parametrize(
    ("statement", "index"),
    [
        (QUERIES.oldest_expired_refresh_session, "ix_refresh_sessions_expires_at"),
        (QUERIES.oldest_expired_sicr, "ix_sicr_expires_at"),
    ],
)
async def test_the_oldest_overdue_row_is_the_first_entry_of_the_partial_index(
    runtime: Runtime, statement: Query, index: str
) -> None:
    """Whatever the table holds, the gauge costs one index-only read at the index's start."""
    now = runtime.clock.now()
    old, later = now - 365 * DAY, now + 10 * DAY
    async with runtime.database.connection() as conn:
        user = await insert_user(conn, old)
        for status, count, expires_at in (
            ("Active", 20000, later),
            ("Active", 500, old),
            ("Expired", 2000, old),
        ):
            await insert_refresh_sessions(
                conn, user, count=count, status=status, created_at=old, expires_at=expires_at
            )
        for status, count, expires_at in (
            ("Pending", 20000, later),
            ("Pending", 500, old),
            ("Expired", 2000, old),
        ):
            await insert_sicr(
                conn, count=count, status=status, created_at=old, expires_at=expires_at
            )
        await conn.execute("analyze")
        plans: list[str] = []

        async def read_from_the_index_alone() -> bool:
            # A vacuum marks the pages all-visible only once no snapshot (another
            # connection's, however brief) predates the inserts: vacuum until it has.
            await conn.execute("vacuum")
            rows = await conn.fetch(
                f"explain (analyze, buffers off, costs off, timing off) {statement.text}", now
            )
            plans.append("\n".join(row[0] for row in rows))
            return "Heap Fetches: 0" in plans[-1]

        await wait_until(read_from_the_index_alone, timeout=30, interval=0.5)
        oldest: datetime = await statement.fetchval(conn, now=now)
    plan = plans[-1]

    assert oldest == old
    # One entry read from the index alone: the first, which is the oldest.
    first_entry = rf"Limit .*\n.*Index Only Scan using {index} .*\(actual rows=1(\.00)? loops=1\)"
    assert re.search(first_entry, plan), plan

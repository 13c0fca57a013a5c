"""The per-day rollups the summary reads: kept once per session, by racing consumers too,
built by the migration exactly as the consumer keeps them, and agreeing with the facts."""

from __future__ import annotations

import asyncio
import random
import struct
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import httpx
import pytest

from pin_sessions.bootstrap.identity import build_token_signer
from pin_sessions.dev_stats.consumers import SessionEndedConsumer
from pin_sessions.dev_stats.domain import SessionFact
from pin_sessions.dev_stats.durations import (
    BUCKETS,
    EXACT_BELOW,
    MAX_DURATION_SECONDS,
    MAX_RELATIVE_ERROR,
)
from pin_sessions.dev_stats.recording import record_session_ended
from pin_sessions.platform.messaging.envelope import Message
from pin_sessions.platform.messaging.metrics import MessagingMetrics
from pin_sessions.platform.messaging.runner import ConsumerRunner, Outcome
from pin_sessions.platform.migrations import available_migrations
from pin_sessions.platform.runtime import Runtime
from tests.conftest import T0
from tests.support.postgres import DatabaseFactory
from tests.support.users import signed_in_user
from tests.support.waiting import wait_until

URL = "/api/dev-stats/sessions/summary"
ROLLUP_MIGRATION = "dev_stats_daily_rollups"

SELECT_ROLLUPS = """
select day, guest_sessions, user_sessions, duration_seconds_sum, duration_histogram
from dev_stats.daily_sessions
order by day
"""

# What the consumer wrote before the rollups existed.
INSERT_FACT_ONLY = """
insert into dev_stats.session_facts
    (session_id, message_id, anonymous_id, user_id, created_at, last_activity_at,
     duration_seconds, recorded_at)
values ($1, $2, $3, $4, $5, $6, $7, $8)
"""

EXACT_FROM_FACTS = """
select count(*) as sessions,
       count(*) filter (where user_id is null) as guest_sessions,
       avg(duration_seconds)::float8 as avg_duration,
       percentile_cont(0.5) within group (order by duration_seconds) as p50,
       percentile_cont(0.9) within group (order by duration_seconds) as p90
from dev_stats.session_facts
"""

COUNT_LOCK_WAITERS = """
select count(*) from pg_stat_activity
where datname = current_database() and wait_event_type = 'Lock'
"""


def _fact(
    *, seconds: int, user: bool = False, started: datetime = T0, session_id: uuid.UUID | None = None
) -> SessionFact:
    return SessionFact(
        session_id=session_id or uuid.uuid4(),
        message_id=uuid.uuid4(),
        anonymous_id=uuid.uuid4(),
        user_id=uuid.uuid4() if user else None,
        created_at=started,
        last_activity_at=started + timedelta(seconds=seconds),
        duration_seconds=seconds,
    )


def _message(fact: SessionFact) -> Message:
    return Message(
        message_id=fact.message_id,
        topic="pin.user-activity.session-ended.v1",
        event_type="pin.user-activity.session-ended",
        version=1,
        aggregate_type="Session",
        aggregate_id=str(fact.session_id),
        created_at=T0,
        payload={
            "SessionId": str(fact.session_id),
            "AnonymousId": str(fact.anonymous_id),
            "UserId": str(fact.user_id) if fact.user_id else None,
            "CreatedAt": fact.created_at.isoformat(),
            "LastActivityAt": fact.last_activity_at.isoformat(),
            "DurationSeconds": fact.duration_seconds,
        },
    )


async def _record(runtime: Runtime, facts: list[SessionFact]) -> None:
    async with runtime.database.transaction() as conn:
        for fact in facts:
            await record_session_ended(conn, fact, now=T0)


async def _rollups(dsn: str) -> list[dict[str, Any]]:
    conn = await asyncpg.connect(dsn)
    try:
        return [dict(row) for row in await conn.fetch(SELECT_ROLLUPS)]
    finally:
        await conn.close()


async def _summary(runtime: Runtime, http: httpx.AsyncClient) -> dict[str, Any]:
    async with runtime.database.transaction() as conn:
        viewer = await signed_in_user(
            conn, build_token_signer(runtime), now=T0, permissions=["dev-stats.view"]
        )
    first = (T0 - timedelta(days=6)).date().isoformat()
    response = await http.get(
        URL, params={"from": first, "to": T0.date().isoformat()}, headers=viewer.headers
    )
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


@pytest.fixture
async def connections(database_url: str) -> AsyncIterator[list[asyncpg.Connection[Any]]]:
    """Eight connections of their own, as eight consumer processes would hold."""
    opened = [await asyncpg.connect(database_url) for _ in range(8)]
    try:
        yield opened
    finally:
        for conn in opened:
            await conn.close()


async def _lock_waiters(conn: asyncpg.Connection[Any]) -> int:
    count: int = await conn.fetchval(COUNT_LOCK_WAITERS)
    return count


# --- first seen, once --------------------------------------------------------------------


async def test_a_redelivered_or_republished_session_is_counted_once_in_the_summary(
    runtime: Runtime, http: httpx.AsyncClient
) -> None:
    runner = ConsumerRunner(
        SessionEndedConsumer(),
        runtime.database,
        runtime.clock,
        MessagingMetrics.register(runtime.registry),
    )
    first = _fact(seconds=120, user=True)
    republished = _fact(seconds=999, session_id=first.session_id)
    assert await runner.process(_message(first)) is Outcome.APPLIED
    assert await runner.process(_message(first)) is Outcome.DUPLICATE
    assert await runner.process(_message(republished)) is Outcome.APPLIED
    await runner.process_all([_message(first), _message(republished)])

    body = await _summary(runtime, http)
    assert (body["sessions"], body["userSessions"], body["avgDurationSeconds"]) == (1, 1, 120.0)


async def test_two_consumers_recording_one_session_at_once_count_it_once(
    runtime: Runtime, http: httpx.AsyncClient, connections: list[asyncpg.Connection[Any]]
) -> None:
    one, other, observer = connections[:3]
    fact = _fact(seconds=30)
    await one.execute("begin")
    assert await record_session_ended(one, fact, now=T0)
    await other.execute("begin")
    second = asyncio.create_task(
        record_session_ended(other, _fact(seconds=45, session_id=fact.session_id), now=T0)
    )
    # The second waits on the first's uncommitted key, then finds it taken.
    await wait_until(lambda: _waiters_at_least(observer, 1), timeout=10)
    await one.execute("commit")
    assert await asyncio.wait_for(second, timeout=10) is False
    await other.execute("commit")

    body = await _summary(runtime, http)
    assert (body["sessions"], body["avgDurationSeconds"], body["p50DurationSeconds"]) == (
        1,
        30.0,
        30.0,
    )


async def test_parallel_consumers_count_every_session_of_a_day_that_has_no_row_yet(
    runtime: Runtime, http: httpx.AsyncClient, connections: list[asyncpg.Connection[Any]]
) -> None:
    *consumers, observer = connections
    facts = [_fact(seconds=10 * (i + 1), user=i % 2 == 0) for i in range(len(consumers))]
    await consumers[0].execute("begin")
    # The first creates the day's row and holds it; the others all try to create it too.
    assert await record_session_ended(consumers[0], facts[0], now=T0)

    async def record(conn: asyncpg.Connection[Any], fact: SessionFact) -> bool:
        async with conn.transaction():
            return await record_session_ended(conn, fact, now=T0)

    others = [
        asyncio.create_task(record(conn, fact))
        for conn, fact in zip(consumers[1:], facts[1:], strict=True)
    ]
    await wait_until(lambda: _waiters_at_least(observer, len(others)), timeout=10, interval=0.02)
    await consumers[0].execute("commit")
    assert await asyncio.wait_for(asyncio.gather(*others), timeout=10) == [True] * len(others)

    body = await _summary(runtime, http)
    seconds = [fact.duration_seconds for fact in facts]
    assert (body["sessions"], body["userSessions"], body["guestSessions"]) == (7, 4, 3)
    assert body["avgDurationSeconds"] == sum(seconds) / len(seconds)
    assert body["p50DurationSeconds"] == 40.0  # under 64 s: exact


async def _waiters_at_least(observer: asyncpg.Connection[Any], count: int) -> bool:
    return await _lock_waiters(observer) >= count


async def test_a_user_id_cleared_from_a_fact_leaves_its_session_a_users_session(
    runtime: Runtime, http: httpx.AsyncClient
) -> None:
    """An erasure keeps counts and durations (SPEC: dev-stats-user-erased); the kind too."""
    await _record(runtime, [_fact(seconds=60, user=True), _fact(seconds=90)])
    async with runtime.database.connection() as conn:
        await conn.execute("update dev_stats.session_facts set user_id = null")

    body = await _summary(runtime, http)
    assert (body["sessions"], body["userSessions"], body["guestSessions"]) == (2, 1, 1)


# --- the stored histogram --------------------------------------------------------------------


def _stored(*counts: int) -> bytes:
    return struct.pack(f">{len(counts)}i", *counts)


@pytest.mark.parametrize(
    ("stored", "bucket", "expected"),
    [
        (_stored(), 0, _stored(1)),
        (_stored(), 3, _stored(0, 0, 0, 1)),
        (_stored(2), 5, _stored(2, 0, 0, 0, 0, 1)),
        (_stored(5, 255, 9), 1, _stored(5, 256, 9)),
        (_stored(65_535), 0, _stored(65_536)),
        (_stored(7, 16_777_215), 1, _stored(7, 16_777_216)),
        (_stored(1), BUCKETS - 1, _stored(1, *[0] * (BUCKETS - 2), 1)),
    ],
)
async def test_one_more_session_counts_in_its_bucket_carrying_and_growing(
    runtime: Runtime, stored: bytes, bucket: int, expected: bytes
) -> None:
    async with runtime.database.connection() as conn:
        added = await conn.fetchval("select dev_stats.histogram_add($1, $2)", stored, bucket)
    assert added == expected


async def test_the_consumers_statement_runs_the_histogram_expression_inline(
    runtime: Runtime,
) -> None:
    """Inlined, not called: a function call per event would cost the consumer its planning."""
    async with runtime.database.connection() as conn:
        plan = await conn.fetch(
            "explain verbose select dev_stats.histogram_add(duration_histogram, 5)"
            " from dev_stats.daily_sessions"
        )
    assert not any("histogram_add" in row[0] for row in plan), plan


async def test_a_day_with_hundreds_of_sessions_in_one_bucket_is_read_whole(
    runtime: Runtime, http: httpx.AsyncClient
) -> None:
    """300 sessions of 10 s before 100 of 1000 s: the median is 10 s only if 300 reads as 300."""
    await _record(runtime, [_fact(seconds=10) for _ in range(300)])
    await _record(runtime, [_fact(seconds=1000) for _ in range(100)])

    body = await _summary(runtime, http)
    assert (body["sessions"], body["p50DurationSeconds"]) == (400, 10.0)
    assert body["p90DurationSeconds"] == pytest.approx(1000.0, rel=MAX_RELATIVE_ERROR)


# --- the migration builds what the consumer keeps -------------------------------------------


BOUNDARY_SECONDS = [
    0, 1, 63, 64, 65, 126, 127, 128, 129, 1000, 4095, 4096, 4097, 86_399, 2**20, 2**30,
    MAX_DURATION_SECONDS - 1, MAX_DURATION_SECONDS,
]  # fmt: skip


def _boundary_facts() -> list[SessionFact]:
    midnight = datetime(2026, 11, 28, tzinfo=UTC)
    starts = [midnight - timedelta(seconds=1), midnight, T0, midnight + timedelta(days=1)]
    return [
        _fact(seconds=seconds, user=i % 3 == 0, started=starts[i % len(starts)])
        for i, seconds in enumerate(BOUNDARY_SECONDS * 2)
    ]


@pytest.fixture
def unmigrated_database(databases: DatabaseFactory) -> Iterator[str]:
    dsn = databases.create(migrated=False)
    try:
        yield dsn
    finally:
        databases.drop(dsn)


async def test_the_migration_builds_from_the_facts_the_rows_the_consumer_keeps(
    unmigrated_database: str, database_url: str, runtime: Runtime
) -> None:
    facts = _boundary_facts()
    await _record(runtime, facts)

    conn = await asyncpg.connect(unmigrated_database)
    try:
        migrations = available_migrations()
        rollup = next(m for m in migrations if m.name == ROLLUP_MIGRATION)
        for migration in migrations:
            if migration.version < rollup.version:
                await conn.execute(migration.sql)
        for fact in facts:
            await conn.execute(
                INSERT_FACT_ONLY,
                fact.session_id,
                fact.message_id,
                fact.anonymous_id,
                fact.user_id,
                fact.created_at,
                fact.last_activity_at,
                fact.duration_seconds,
                T0,
            )
        await conn.execute(rollup.sql)
    finally:
        await conn.close()

    built, kept = await _rollups(unmigrated_database), await _rollups(database_url)
    assert [row["day"].isoformat() for row in kept] == ["2026-11-27", "2026-11-28", "2026-11-29"]
    assert built == kept


# --- the summary agrees with the facts ------------------------------------------------------


def _lognormal(rng: random.Random) -> int:
    return min(round(rng.lognormvariate(5.7, 1.3)), MAX_DURATION_SECONDS)


DISTRIBUTIONS: dict[str, Callable[[random.Random], int]] = {
    "minutes-lognormal": _lognormal,
    "uniform-to-a-day": lambda rng: rng.randrange(86_400),
    "seconds-to-years": lambda rng: rng.randrange(1 << rng.randrange(32)),
    "short-or-long": lambda rng: rng.choice([rng.randrange(30), rng.randrange(3_600, 7_200)]),
    "all-the-same": lambda rng: 4_321,
    "under-64-seconds": lambda rng: rng.randrange(EXACT_BELOW),
}


@pytest.mark.parametrize("name", sorted(DISTRIBUTIONS))
async def test_the_summary_agrees_with_the_facts_within_the_percentile_promise(
    runtime: Runtime, http: httpx.AsyncClient, name: str
) -> None:
    rng = random.Random(name)
    facts = [
        _fact(
            seconds=DISTRIBUTIONS[name](rng),
            user=rng.random() < 0.4,
            started=T0 - timedelta(days=rng.randrange(7), seconds=rng.randrange(40_000)),
        )
        for _ in range(400)
    ]
    await _record(runtime, facts)
    async with runtime.database.connection() as conn:
        exact = await conn.fetchrow(EXACT_FROM_FACTS)
    assert exact is not None

    body = await _summary(runtime, http)

    assert (body["sessions"], body["guestSessions"]) == (400, exact["guest_sessions"])
    assert body["avgDurationSeconds"] == pytest.approx(exact["avg_duration"], rel=1e-12)
    assert sum(day["sessions"] for day in body["byDay"]) == 400
    for key, exact_value in (
        ("p50DurationSeconds", exact["p50"]),
        ("p90DurationSeconds", exact["p90"]),
    ):
        if name == "under-64-seconds":
            assert body[key] == exact_value
        else:
            assert abs(body[key] - exact_value) <= MAX_RELATIVE_ERROR * exact_value, key

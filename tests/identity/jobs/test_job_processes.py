"""The identity jobs as real OS processes: parallel instances, signals, metrics, ``--once``."""

from __future__ import annotations

import json
import signal
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import httpx

from tests.identity.jobs.rows import (
    CREATE_TRANSITION_AUDIT,
    insert_refresh_sessions,
    insert_sicr,
    insert_user,
    statuses,
)
from tests.support.processes import (
    communicate,
    free_port,
    metrics_of_up,
    pin_sessions,
)
from tests.support.waiting import wait_until

EXPIRED_REFRESH_SESSIONS = 50_000
EXPIRED_SICR = 10_000

COUNT_LOCK_WAITERS = """
select count(*) from pg_stat_activity
where datname = current_database() and wait_event_type = 'Lock'
"""


async def _seed_expired(database_url: str, refresh: int, sicr: int) -> None:
    # The job processes read the wall clock, so the rows expired an hour before it.
    now = datetime.now(UTC)
    conn = await asyncpg.connect(database_url)
    try:
        user = await insert_user(conn, now)
        expired = now - timedelta(hours=1)
        created = now - timedelta(days=30)
        await insert_refresh_sessions(
            conn, user, count=refresh, status="Active", created_at=created, expires_at=expired
        )
        await insert_sicr(
            conn, count=sicr, status="Pending", created_at=created, expires_at=expired
        )
        await conn.execute(CREATE_TRANSITION_AUDIT)
    finally:
        await conn.close()


async def _count_lock_waiters(database_url: str) -> int:
    conn = await asyncpg.connect(database_url)
    try:
        count: int = await conn.fetchval(COUNT_LOCK_WAITERS)
        return count
    finally:
        await conn.close()


def _log_events(stderr: str, name: str) -> list[dict[str, Any]]:
    events = []
    for line in stderr.splitlines():
        if line.startswith("{"):
            event = json.loads(line)
            if event.get("event") == name:
                events.append(event)
    return events


async def test_two_processes_flip_every_expired_row_exactly_once(
    database_url: str, settings_env: dict[str, str]
) -> None:
    await _seed_expired(database_url, EXPIRED_REFRESH_SESSIONS, EXPIRED_SICR)
    env = {
        **settings_env,
        "PIN_EXPIRE_SESSIONS__BATCH_SIZE": "500",
        "PIN_EXPIRE_SESSIONS__LOCK_TIMEOUT": "120",
    }
    # A share lock on the table holds both instances at their first chunk, so they
    # really run side by side once it is released.
    gate = await asyncpg.connect(database_url)
    try:
        gate_transaction = gate.transaction()
        await gate_transaction.start()
        await gate.execute("lock table identity.refresh_sessions in share mode")
        processes = [pin_sessions("job", "expire-sessions", "--once", env=env) for _ in range(2)]
        # pg_stat_activity is read once per transaction: the gate's own would never change.

        async def both_waiting() -> bool:
            assert all(process.poll() is None for process in processes)
            return await _count_lock_waiters(database_url) >= 2

        await wait_until(both_waiting, timeout=60)
        await gate_transaction.rollback()
        outputs = [await communicate(process) for process in processes]
        transitions = await gate.fetchrow(
            "select count(*) as total, count(distinct row_id) as distinct_rows, "
            "count(*) filter (where new_status <> 'Expired') as other "
            "from public.test_transitions"
        )
        largest_transaction = await gate.fetchval(
            "select max(n) from (select count(*) as n from public.test_transitions "
            "group by txid) as per_transaction"
        )
        refresh = await statuses(gate, "refresh_sessions")
        sicr = await statuses(gate, "sign_in_confirmation_requests")
    finally:
        await gate.close()

    assert transitions is not None
    results = []
    for process, (out, err) in zip(processes, outputs, strict=True):
        assert process.returncode == 0, err[-3000:]
        lines = out.splitlines()
        assert len(lines) == 1, out
        results.append(json.loads(lines[0]))
    assert all(
        set(result)
        == {"jobRunId", "refreshExpired", "sicrExpired", "durationMs", "backlogRemaining"}
        for result in results
    )
    assert sum(result["refreshExpired"] for result in results) == EXPIRED_REFRESH_SESSIONS
    assert sum(result["sicrExpired"] for result in results) == EXPIRED_SICR
    assert all(result["refreshExpired"] > 0 for result in results), "both instances took portions"
    total = EXPIRED_REFRESH_SESSIONS + EXPIRED_SICR
    assert (transitions["total"], transitions["distinct_rows"], transitions["other"]) == (
        total,
        total,
        0,
    )
    assert largest_transaction <= 500
    assert refresh == {"Expired": EXPIRED_REFRESH_SESSIONS}
    assert sicr == {"Expired": EXPIRED_SICR}


async def test_sigterm_stops_the_loop_between_chunks_with_every_started_chunk_committed(
    database_url: str, settings_env: dict[str, str]
) -> None:
    await _seed_expired(database_url, EXPIRED_REFRESH_SESSIONS, 0)
    port = free_port()
    process = pin_sessions(
        "job",
        "expire-sessions",
        "--metrics-port",
        str(port),
        env={**settings_env, "PIN_EXPIRE_SESSIONS__BATCH_SIZE": "20"},
    )
    conn = await asyncpg.connect(database_url)
    try:

        async def transitioned() -> bool:
            assert process.poll() is None, process.communicate()[1][-3000:]
            return bool(await conn.fetchval("select count(*) from public.test_transitions"))

        await wait_until(transitioned, timeout=60, interval=0.02)
        metrics = httpx.get(f"http://127.0.0.1:{port}/metrics").text
        process.send_signal(signal.SIGTERM)
        _, err = await communicate(process)
        per_transaction = await conn.fetch(
            "select count(*) as n from public.test_transitions group by txid"
        )
        refresh = await statuses(conn, "refresh_sessions")
    finally:
        await conn.close()

    assert process.returncode == 0, err[-3000:]
    completed = _log_events(err, "job completed")
    assert len(completed) == 1
    expired = completed[0]["refreshExpired"]
    assert 0 < expired < EXPIRED_REFRESH_SESSIONS, "stopped mid-backlog"
    assert refresh == {"Expired": expired, "Active": EXPIRED_REFRESH_SESSIONS - expired}
    assert {row["n"] for row in per_transaction} == {20}, "no chunk was cut short"
    assert completed[0]["backlogRemaining"] == EXPIRED_REFRESH_SESSIONS - expired
    assert "identity_expire_sessions_refresh_expired_total" in metrics
    assert "identity_expire_sessions_last_success_timestamp_seconds" in metrics


async def test_up_shows_the_identity_jobs_metrics_on_the_api_metrics(
    settings_env: dict[str, str],
) -> None:
    metrics = await metrics_of_up(settings_env)
    for name in (
        "identity_expire_sessions_refresh_expired_total",
        "identity_expire_sessions_backlog",
        "identity_expire_sessions_last_success_timestamp_seconds",
        "identity_session_retention_deleted_total",
    ):
        assert name in metrics
    # Seed 000 names the backlog and the errors as single series: a labelled one would
    # read `name{phase="..."}` here, never the bare name.
    samples = {line.split(" ")[0] for line in metrics.splitlines() if not line.startswith("#")}
    assert {"identity_expire_sessions_backlog", "identity_expire_sessions_errors_total"} <= samples


async def test_session_retention_once_prints_its_result_as_one_json_object(
    database_url: str, settings_env: dict[str, str]
) -> None:
    now = datetime.now(UTC)
    conn = await asyncpg.connect(database_url)
    try:
        old = now - timedelta(days=200)
        user = await insert_user(conn, old)
        await insert_sicr(conn, count=3, status="Expired", created_at=old, expires_at=old)
        await insert_refresh_sessions(
            conn, user, count=2, status="Expired", created_at=old, expires_at=old
        )
    finally:
        await conn.close()

    process = pin_sessions("job", "session-retention", "--once", env=settings_env)
    out, err = await communicate(process)

    assert process.returncode == 0, err[-3000:]
    result = json.loads(out)
    assert result == {
        "jobRunId": result["jobRunId"],
        "sicrDeleted": 3,
        "refreshDeleted": 2,
        "durationMs": result["durationMs"],
    }

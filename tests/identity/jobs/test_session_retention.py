"""SessionRetentionJob: what it deletes, what it never deletes, and how it finds rows."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from prometheus_client import CollectorRegistry

from pin_sessions.identity.jobs.session_retention import build_session_retention_job
from pin_sessions.identity.repository.loaded import QUERIES
from pin_sessions.platform.batching import EARLIEST
from pin_sessions.platform.jobs import PollingWorker, RunResult
from pin_sessions.platform.runtime import Runtime
from pin_sessions.settings import SessionRetentionSettings
from tests.identity.jobs.rows import (
    CREATE_TRANSITION_AUDIT,
    insert_refresh_sessions,
    insert_sicr,
    insert_user,
    statuses,
)

DAY = timedelta(days=1)


async def _retain_once(runtime: Runtime, registry: CollectorRegistry, **options: Any) -> RunResult:
    job = build_session_retention_job(runtime.database, SessionRetentionSettings(**options))
    worker = PollingWorker(
        job, clock=runtime.clock, interval=job.options.polling_interval, registry=registry
    )
    result = await worker.run_pass(asyncio.Event())
    assert result is not None
    return result


async def test_terminal_sicr_older_than_30_days_are_deleted_and_pending_never(
    runtime: Runtime, registry: CollectorRegistry
) -> None:
    now = runtime.clock.now()
    old = now - 30 * DAY - timedelta(seconds=1)
    recent = now - 29 * DAY
    async with runtime.database.connection() as conn:
        await insert_sicr(conn, count=2, status="Expired", created_at=old, expires_at=old)
        await insert_sicr(
            conn, count=3, status="Confirmed", created_at=old, expires_at=old, confirmed_at=old
        )
        # A Pending request is never deleted, however old (the expiry job owns it).
        await insert_sicr(conn, count=4, status="Pending", created_at=old, expires_at=old)
        await insert_sicr(conn, count=5, status="Expired", created_at=recent, expires_at=recent)

    result = await _retain_once(runtime, registry)

    assert (result.count("sicrDeleted"), result.count("refreshDeleted")) == (5, 0)
    async with runtime.database.connection() as conn:
        assert await statuses(conn, "sign_in_confirmation_requests") == {"Pending": 4, "Expired": 5}
    deleted = {"table": "sign_in_confirmation_requests"}
    assert registry.get_sample_value("identity_session_retention_deleted_total", deleted) == 5


async def test_terminal_refresh_sessions_created_over_90_days_ago_go_and_active_never(
    runtime: Runtime, registry: CollectorRegistry
) -> None:
    now = runtime.clock.now()
    async with runtime.database.connection() as conn:
        user = await insert_user(conn, now - 200 * DAY)

        async def sessions(status: str, created_days_ago: int, **at: Any) -> None:
            created_at = now - created_days_ago * DAY
            await insert_refresh_sessions(
                conn,
                user,
                count=1,
                status=status,
                created_at=created_at,
                expires_at=created_at + 30 * DAY,
                **at,
            )

        await sessions("Expired", 91)
        await sessions("Rotated", 120, rotated_at=now - 100 * DAY)
        # Gone too: age counts from creation, however recent the revoke.
        await sessions("Revoked", 95, revoked_at=now - 10 * DAY, revoked_reason="TokenReuse")
        # Kept: created exactly 90 days ago, or less.
        await sessions("Expired", 90)
        await sessions("Rotated", 89, rotated_at=now - 89 * DAY)
        await sessions("Revoked", 60, revoked_at=now - 60 * DAY, revoked_reason="Logout")
        # Active is never deleted, however old.
        await sessions("Active", 150)

    result = await _retain_once(runtime, registry)

    assert (result.count("sicrDeleted"), result.count("refreshDeleted")) == (0, 3)
    async with runtime.database.connection() as conn:
        assert await statuses(conn, "refresh_sessions") == {
            "Active": 1,
            "Revoked": 1,
            "Rotated": 1,
            "Expired": 1,
        }
    deleted = {"table": "refresh_sessions"}
    assert registry.get_sample_value("identity_session_retention_deleted_total", deleted) == 3


async def test_retention_deletes_in_bounded_batches(
    runtime: Runtime, registry: CollectorRegistry
) -> None:
    now = runtime.clock.now()
    old = now - 365 * DAY
    async with runtime.database.connection() as conn:
        await insert_sicr(conn, count=25, status="Expired", created_at=old, expires_at=old)
        await conn.execute(CREATE_TRANSITION_AUDIT)

    result = await _retain_once(runtime, registry, batch_size=10)

    assert result.count("sicrDeleted") == 25
    async with runtime.database.connection() as conn:
        per_transaction = await conn.fetch(
            "select count(*) as n from public.test_transitions group by txid order by n desc"
        )
    assert [row["n"] for row in per_transaction] == [10, 10, 5]


async def test_a_spent_run_budget_leaves_each_phase_one_batch_and_the_rest_to_the_next_run(
    runtime: Runtime, registry: CollectorRegistry
) -> None:
    now = runtime.clock.now()
    old = now - 365 * DAY
    async with runtime.database.connection() as conn:
        user = await insert_user(conn, old)
        await insert_sicr(conn, count=25, status="Expired", created_at=old, expires_at=old)
        await insert_refresh_sessions(
            conn, user, count=25, status="Expired", created_at=old, expires_at=old
        )

    result = await _retain_once(
        runtime, registry, batch_size=10, max_run_duration=timedelta(microseconds=1)
    )

    # The budget is spent after the first batch; refresh sessions still get theirs.
    assert (result.count("sicrDeleted"), result.count("refreshDeleted")) == (10, 10)
    assert result.succeeded
    async with runtime.database.connection() as conn:
        assert await statuses(conn, "sign_in_confirmation_requests") == {"Expired": 15}
        assert await statuses(conn, "refresh_sessions") == {"Expired": 15}


async def test_every_job_statement_finds_its_rows_through_an_index(runtime: Runtime) -> None:
    # Planned over analysed tables of a realistic shape (most rows live, a few to act
    # on): a plan that scans the table instead would read all of it on every chunk.
    now = runtime.clock.now()
    old, later = now - 365 * DAY, now + 10 * DAY
    async with runtime.database.connection() as conn:
        user = await insert_user(conn, old)
        for status, count, expires_at in (("Active", 20000, later), ("Active", 500, old)):
            await insert_refresh_sessions(
                conn, user, count=count, status=status, created_at=old, expires_at=expires_at
            )
        await insert_refresh_sessions(
            conn, user, count=500, status="Expired", created_at=old, expires_at=old
        )
        await insert_sicr(conn, count=20000, status="Pending", created_at=now, expires_at=later)
        await insert_sicr(conn, count=500, status="Pending", created_at=old, expires_at=old)
        await insert_sicr(conn, count=500, status="Expired", created_at=old, expires_at=old)
        await conn.execute("analyze")
        expectations = [
            (QUERIES.expire_refresh_sessions_chunk, "ix_refresh_sessions_expires_at"),
            (QUERIES.expire_sicr_chunk, "ix_sicr_expires_at"),
            (QUERIES.delete_retired_sicr_batch, "ix_sicr_retention_created_at"),
            (
                QUERIES.delete_retired_refresh_sessions_batch,
                "ix_refresh_sessions_retention_created_at",
            ),
        ]
        for query, index in expectations:
            arguments = query.args(bound=now, batch_size=5000, reached=EARLIEST)
            rows = await conn.fetch(f"explain {query.text}", *arguments)
            plan = "\n".join(row[0] for row in rows)
            assert "Seq Scan" not in plan and index in plan, plan

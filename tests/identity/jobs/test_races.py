"""ExpireSessionsJob racing the real confirm and refresh operations, in both orders.

A third connection holds the row lock while the two contenders line up behind it, so
the order in which they reach the row is fixed (PostgreSQL queues row-lock waiters in
arrival order) and both are truly in flight at once. The job decides with a ``now``
just past expiry, the operation with one just before it: each is entitled to its own
transition, and the status guard lets exactly one of them happen.
"""

from __future__ import annotations

import asyncio
import secrets
import uuid
from collections.abc import Callable, Coroutine
from datetime import timedelta
from typing import Any

import asyncpg
import pytest
from prometheus_client import CollectorRegistry

from pin_sessions.bootstrap.identity import build_dev_codes, build_identity_operations
from pin_sessions.identity.errors import ConfirmationExpired, SessionExpired
from pin_sessions.identity.operations import Device, IdentityOperations, TokenPair
from pin_sessions.platform.clock import FixedClock
from pin_sessions.platform.runtime import Runtime
from tests.identity.jobs.support import expire_once
from tests.support.waiting import wait_until

SECOND = timedelta(seconds=1)
DEVICE = Device(user_agent="race-test", ip=None)

COUNT_LOCK_WAITERS = """
select count(*) from pg_stat_activity
where datname = current_database() and wait_event_type = 'Lock'
"""


async def _lock_waiters(database_url: str) -> int:
    conn = await asyncpg.connect(database_url)
    try:
        count: int = await conn.fetchval(COUNT_LOCK_WAITERS)
        return count
    finally:
        await conn.close()


async def in_lock_order(
    database_url: str,
    lock_row_sql: str,
    row_id: uuid.UUID,
    first: Callable[[], Coroutine[Any, Any, Any]],
    second: Callable[[], Coroutine[Any, Any, Any]],
) -> list[Any]:
    """Run ``first`` and ``second`` concurrently, reaching the row in that order."""
    holder = await asyncpg.connect(database_url)
    try:
        holding = holder.transaction()
        await holding.start()
        await holder.execute(lock_row_sql, row_id)
        tasks: list[asyncio.Task[Any]] = []
        for waiters, contender in enumerate((first, second), start=1):
            tasks.append(asyncio.create_task(contender()))

            async def queued(task: asyncio.Task[Any] = tasks[-1], count: int = waiters) -> bool:
                assert not task.done(), task
                return await _lock_waiters(database_url) >= count

            await wait_until(queued, timeout=60, interval=0.01)
        await holding.rollback()
        return await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        await holder.close()


@pytest.fixture
def operations(runtime: Runtime) -> IdentityOperations:
    assert runtime.settings.dev_codes, "identity's tests read codes as a dev server shows them"
    return build_identity_operations(runtime)


async def _request_code(
    runtime: Runtime, operations: IdentityOperations
) -> tuple[uuid.UUID, str, Any]:
    phone = "+4479" + str(secrets.randbelow(10**8)).zfill(8)
    request = await operations.request_sign_in(phone, None, runtime.clock.now())
    dev_codes = build_dev_codes(runtime)
    assert dev_codes is not None
    code = await dev_codes.code(request.request_id)
    assert code is not None
    return request.request_id, code, request.expires_at


LOCK_SICR = "select 1 from identity.sign_in_confirmation_requests where id = $1 for update"
LOCK_SESSION = "select 1 from identity.refresh_sessions where id = $1 for update"


async def _status(runtime: Runtime, table: str, row_id: uuid.UUID) -> str:
    async with runtime.database.connection() as conn:
        status: str = await conn.fetchval(
            f"select status from identity.{table} where id = $1",
            row_id,
        )
        return status


async def test_job_first_then_confirm_is_refused_as_expired(
    runtime: Runtime,
    registry: CollectorRegistry,
    clock: FixedClock,
    operations: IdentityOperations,
    database_url: str,
) -> None:
    request_id, code, expires_at = await _request_code(runtime, operations)
    clock.set(expires_at + SECOND)

    job, confirm = await in_lock_order(
        database_url,
        LOCK_SICR,
        request_id,
        lambda: expire_once(runtime, registry),
        lambda: operations.confirm_sign_in(request_id, code, None, DEVICE, expires_at - SECOND),
    )

    assert job.count("sicrExpired") == 1
    assert isinstance(confirm, ConfirmationExpired)
    assert confirm.code == "IDENTITY_CONFIRMATION_EXPIRED"
    assert await _status(runtime, "sign_in_confirmation_requests", request_id) == "Expired"


async def test_confirm_first_then_the_job_leaves_the_request_confirmed(
    runtime: Runtime,
    registry: CollectorRegistry,
    clock: FixedClock,
    operations: IdentityOperations,
    database_url: str,
) -> None:
    request_id, code, expires_at = await _request_code(runtime, operations)
    clock.set(expires_at + SECOND)

    confirm, job = await in_lock_order(
        database_url,
        LOCK_SICR,
        request_id,
        lambda: operations.confirm_sign_in(request_id, code, None, DEVICE, expires_at - SECOND),
        lambda: expire_once(runtime, registry),
    )

    assert isinstance(confirm, TokenPair)
    assert job.count("sicrExpired") == 0
    assert await _status(runtime, "sign_in_confirmation_requests", request_id) == "Confirmed"


async def _signed_in(runtime: Runtime, operations: IdentityOperations) -> TokenPair:
    request_id, code, _ = await _request_code(runtime, operations)
    return await operations.confirm_sign_in(request_id, code, None, DEVICE, runtime.clock.now())


async def test_job_first_then_refresh_is_refused_as_expired(
    runtime: Runtime,
    registry: CollectorRegistry,
    clock: FixedClock,
    operations: IdentityOperations,
    database_url: str,
) -> None:
    pair = await _signed_in(runtime, operations)
    expires_at = pair.refresh_token_expires_at
    clock.set(expires_at + SECOND)

    job, refresh = await in_lock_order(
        database_url,
        LOCK_SESSION,
        pair.session_id,
        lambda: expire_once(runtime, registry),
        lambda: operations.refresh(pair.refresh_token, DEVICE.ip, expires_at - SECOND),
    )

    assert job.count("refreshExpired") == 1
    assert isinstance(refresh, SessionExpired)
    assert refresh.code == "IDENTITY_SESSION_EXPIRED"
    assert await _status(runtime, "refresh_sessions", pair.session_id) == "Expired"


async def test_refresh_first_then_the_job_leaves_the_session_rotated(
    runtime: Runtime,
    registry: CollectorRegistry,
    clock: FixedClock,
    operations: IdentityOperations,
    database_url: str,
) -> None:
    pair = await _signed_in(runtime, operations)
    expires_at = pair.refresh_token_expires_at
    clock.set(expires_at + SECOND)

    refresh, job = await in_lock_order(
        database_url,
        LOCK_SESSION,
        pair.session_id,
        lambda: operations.refresh(pair.refresh_token, DEVICE.ip, expires_at - SECOND),
        lambda: expire_once(runtime, registry),
    )

    assert isinstance(refresh, TokenPair)
    assert job.count("refreshExpired") == 0
    assert await _status(runtime, "refresh_sessions", pair.session_id) == "Rotated"
    # The successor lives 30 days from the refresh: far from expired.
    assert await _status(runtime, "refresh_sessions", refresh.session_id) == "Active"

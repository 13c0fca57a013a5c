from __future__ import annotations

import contextlib
import uuid

import asyncpg
import pytest

from pin_sessions.platform.database import Database
from pin_sessions.platform.errors import ServiceUnavailable, UniqueViolation, ValidationFailed
from pin_sessions.platform.runtime import Runtime

INSERT_OUTBOX_ROW = """
insert into messaging.outbox
    (message_id, topic, event_type, version, aggregate_type, aggregate_id, payload, created_at)
values ($1, 't.v1', 't', 1, 'T', 'x', '{}', now())
"""


async def test_text_postgresql_cannot_store_is_a_validation_error(runtime: Runtime) -> None:
    async def store_nul() -> None:
        async with runtime.database.transaction() as conn:
            await conn.execute("select $1::jsonb", {"a": "\x00"})

    with pytest.raises(ValidationFailed):
        await store_nul()


async def test_a_unique_violation_keeps_the_constraint_name(runtime: Runtime) -> None:
    message_id = uuid.uuid4()

    async def insert_twice() -> None:
        async with runtime.database.transaction() as conn:
            await conn.execute(INSERT_OUTBOX_ROW, message_id)
            await conn.execute(INSERT_OUTBOX_ROW, message_id)

    with pytest.raises(UniqueViolation) as caught:
        await insert_twice()
    assert caught.value.constraint == "ux_outbox_message_id"


@pytest.mark.parametrize("kind", ["transaction", "autocommit"])
async def test_a_connection_lost_under_a_call_is_a_503_and_never_goes_back_to_the_pool(
    runtime: Runtime, database_url: str, kind: str
) -> None:
    """The server ends the session mid-transaction or between two statements (as a primary
    that dies or shuts down does): the caller gets a 503 with Retry-After, and every pooled
    connection still works."""
    database = runtime.database
    opened = database.transaction() if kind == "transaction" else database.connection()

    async def lost() -> None:
        async with opened as conn:
            await terminate_backend(database_url, conn.get_server_pid())
            await conn.fetchval("select 1")

    with pytest.raises(ServiceUnavailable) as caught:
        await lost()
    assert caught.value.retry_after is not None
    await every_pooled_connection_answers(database, runtime.settings.database.pool_max)


async def terminate_backend(database_url: str, pid: int) -> None:
    """End one backend's session from another connection, as a server shutting down does."""
    admin = await asyncpg.connect(database_url)
    try:
        assert await admin.fetchval("select pg_terminate_backend($1)", pid)
    finally:
        await admin.close()


async def every_pooled_connection_answers(database: Database, pool_size: int) -> None:
    """Hold the whole pool at once, so a broken connection put back in it would be met."""
    async with contextlib.AsyncExitStack() as held:
        for _ in range(pool_size):
            conn = await held.enter_async_context(database.connection())
            assert await conn.fetchval("select 1") == 1

from __future__ import annotations

import uuid

import pytest

from pin_sessions.platform.errors import UniqueViolation, ValidationFailed
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

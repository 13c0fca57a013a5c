from __future__ import annotations

import uuid

import pytest

from pin_sessions.platform.outbox import IntegrationEvent, append
from pin_sessions.platform.runtime import Runtime
from tests.conftest import T0


def _event() -> IntegrationEvent:
    session_id = uuid.uuid4()
    return IntegrationEvent(
        topic="pin.test.things.v1",
        event_type="pin.test.thing-happened",
        version=1,
        aggregate_type="Thing",
        aggregate_id=session_id,
        payload={"ThingId": session_id, "HappenedAt": T0, "Count": 3},
    )


async def test_an_event_is_stored_with_its_metadata_and_a_flat_payload(runtime: Runtime) -> None:
    event = _event()
    async with runtime.database.transaction() as conn:
        await append(conn, event, now=T0)
    async with runtime.database.connection() as conn:
        row = await conn.fetchrow("select * from messaging.outbox")
    assert row is not None
    assert row["message_id"] == event.message_id
    assert row["aggregate_id"] == str(event.aggregate_id)
    assert row["created_at"] == T0
    assert row["payload"] == {
        "ThingId": str(event.aggregate_id),
        "HappenedAt": T0.isoformat(),
        "Count": 3,
    }


async def test_a_rolled_back_transaction_leaves_no_event(runtime: Runtime) -> None:
    class Abort(Exception):
        pass

    async def append_then_fail() -> None:
        async with runtime.database.transaction() as conn:
            await append(conn, _event(), now=T0)
            raise Abort

    with pytest.raises(Abort):
        await append_then_fail()
    async with runtime.database.connection() as conn:
        assert await conn.fetchval("select count(*) from messaging.outbox") == 0


def test_event_type_and_version_follow_from_the_topic() -> None:
    event = IntegrationEvent.on_topic(
        "pin.user-activity.session-ended.v1",
        aggregate_type="Session",
        aggregate_id=uuid.uuid4(),
        payload={},
    )
    assert event.event_type == "pin.user-activity.session-ended"
    assert event.version == 1


def test_a_topic_without_a_version_suffix_is_refused() -> None:
    with pytest.raises(ValueError, match="does not end in"):
        IntegrationEvent.on_topic(
            "pin.user-activity.session-ended",
            aggregate_type="Session",
            aggregate_id=uuid.uuid4(),
            payload={},
        )

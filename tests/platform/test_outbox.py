from __future__ import annotations

import math
import uuid
from dataclasses import replace
from datetime import datetime

import pytest

from pin_sessions.platform.outbox import IntegrationEvent, append, append_all
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


async def test_many_events_are_stored_in_order_each_with_its_own_metadata_and_payload(
    runtime: Runtime,
) -> None:
    # One statement writes them all: each row must get its own event's fields, in the
    # caller's order (position), whatever their topics.
    events = [
        IntegrationEvent.on_topic(
            f"pin.test.things-{n % 3}.v{n % 2 + 1}",
            aggregate_type=f"Thing{n % 2}",
            aggregate_id=uuid.uuid4(),
            payload={"N": n, "Name": f"thing {n}", "At": T0, "Nested": {"List": [n, None]}},
        )
        for n in range(7)
    ]
    async with runtime.database.transaction() as conn:
        await append_all(conn, events, now=T0)
    async with runtime.database.connection() as conn:
        rows = await conn.fetch("select * from messaging.outbox order by position")
    columns = ("message_id", "topic", "event_type", "version", "aggregate_type", "aggregate_id")
    assert [[row[column] for column in columns] for row in rows] == [
        [e.message_id, e.topic, e.event_type, e.version, e.aggregate_type, str(e.aggregate_id)]
        for e in events
    ]
    assert [row["payload"] for row in rows] == [
        {**event.payload, "At": T0.isoformat()} for event in events
    ]
    assert {row["created_at"] for row in rows} == {T0}


@pytest.mark.parametrize(
    ("value", "error"),
    [(datetime(2026, 11, 29, 12, 0), ValueError), (math.nan, ValueError), (object(), TypeError)],
    ids=["naive timestamp", "NaN", "no JSON form"],
)
async def test_a_payload_value_without_a_json_form_writes_no_event_of_the_call(
    runtime: Runtime, value: object, error: type[Exception]
) -> None:
    with pytest.raises(error):
        async with runtime.database.transaction() as conn:
            await append_all(conn, [_event(), replace(_event(), payload={"Bad": value})], now=T0)
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

"""Writing integration events to the transactional outbox (SPEC §6).

``append`` runs on the caller's connection, inside the caller's transaction, so the
event exists exactly when the state change does. Delivery is the relay's job.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from opentelemetry import propagate

from pin_sessions.platform.database import Connection
from pin_sessions.platform.ids import new_id


@dataclass(frozen=True)
class IntegrationEvent:
    """One publication: the flat PascalCase payload plus its metadata."""

    topic: str
    event_type: str
    version: int
    aggregate_type: str
    aggregate_id: uuid.UUID
    payload: Mapping[str, Any]
    message_id: uuid.UUID = field(default_factory=new_id)

    @classmethod
    def on_topic(
        cls,
        topic: str,
        *,
        aggregate_type: str,
        aggregate_id: uuid.UUID,
        payload: Mapping[str, Any],
    ) -> IntegrationEvent:
        """EventType and Version follow from the topic: ``pin.a.b.v1`` is ``pin.a.b``, version 1."""
        event_type, _, version = topic.rpartition(".v")
        if not event_type or not version.isdigit():
            raise ValueError(f"topic {topic!r} does not end in .v<ContractVersion>")
        return cls(
            topic=topic,
            event_type=event_type,
            version=int(version),
            aggregate_type=aggregate_type,
            aggregate_id=aggregate_id,
            payload=payload,
        )


# Every event of one call in one statement: the arrays (and the payloads, one JSON array
# encoded once) are zipped row by row, in the caller's order, which `position` keeps. One
# statement instead of a row each spares the server an executor run per event; encoding the
# payloads in one pass spares the client a JSON encoder call per event.
INSERT_EVENTS = """
insert into messaging.outbox
    (message_id, topic, event_type, version, aggregate_type, aggregate_id, payload, headers,
     created_at)
select e.message_id, e.topic, e.event_type, e.version, e.aggregate_type, e.aggregate_id,
       e.payload, $8::jsonb, $9::timestamptz
from rows from (
    unnest($1::uuid[]), unnest($2::text[]), unnest($3::text[]), unnest($4::int[]),
    unnest($5::text[]), unnest($6::text[]), jsonb_array_elements($7::text::jsonb)
) with ordinality
    as e (message_id, topic, event_type, version, aggregate_type, aggregate_id, payload, n)
order by e.n
"""


def to_json_value(value: Any) -> Any:
    """A payload value JSON has no type for: ISO-8601 timestamps with offset, UUIDs as text."""
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError("event timestamps must be timezone-aware")
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not a payload value")


def encode_payloads(events: Sequence[IntegrationEvent]) -> str:
    """The payloads as one JSON array; NaN and the infinities are refused, as everywhere."""
    return json.dumps(
        [dict(event.payload) for event in events],
        default=to_json_value,
        allow_nan=False,
        separators=(",", ":"),
    )


async def append(conn: Connection, event: IntegrationEvent, *, now: datetime) -> None:
    """Write ``event`` in the transaction that ``conn`` is in."""
    await append_all(conn, [event], now=now)


async def append_all(
    conn: Connection, events: Sequence[IntegrationEvent], *, now: datetime
) -> None:
    """Write ``events`` in the transaction that ``conn`` is in, in order, in one statement."""
    if not events:
        return
    trace_headers: dict[str, str] = {}
    propagate.inject(trace_headers)
    await conn.execute(
        INSERT_EVENTS,
        [event.message_id for event in events],
        [event.topic for event in events],
        [event.event_type for event in events],
        [event.version for event in events],
        [event.aggregate_type for event in events],
        [str(event.aggregate_id) for event in events],
        encode_payloads(events),
        trace_headers,
        now,
    )

"""Writing integration events to the transactional outbox (SPEC §6).

``append`` runs on the caller's connection, inside the caller's transaction, so the
event exists exactly when the state change does. Delivery is the relay's job.
"""

from __future__ import annotations

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


INSERT_EVENT = """
insert into messaging.outbox
    (message_id, topic, event_type, version, aggregate_type, aggregate_id, payload, headers,
     created_at)
values ($1, $2, $3, $4, $5, $6, $7, $8, $9)
"""


def to_json_value(value: Any) -> Any:
    """Payload values as JSON: ISO-8601 timestamps with offset, UUIDs as text."""
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError("event timestamps must be timezone-aware")
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    return value


async def append(conn: Connection, event: IntegrationEvent, *, now: datetime) -> None:
    """Write ``event`` in the transaction that ``conn`` is in."""
    await append_all(conn, [event], now=now)


async def append_all(
    conn: Connection, events: Sequence[IntegrationEvent], *, now: datetime
) -> None:
    """Write ``events`` in the transaction that ``conn`` is in, in one pipelined round trip."""
    if not events:
        return
    trace_headers: dict[str, str] = {}
    propagate.inject(trace_headers)
    await conn.executemany(
        INSERT_EVENT,
        [
            (
                event.message_id,
                event.topic,
                event.event_type,
                event.version,
                event.aggregate_type,
                str(event.aggregate_id),
                {name: to_json_value(value) for name, value in event.payload.items()},
                trace_headers,
                now,
            )
            for event in events
        ],
    )

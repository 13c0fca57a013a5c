"""One delivered message, the same on both buses: metadata plus the flat payload."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import asyncpg

TRACEPARENT = "traceparent"


@dataclass(frozen=True)
class Message:
    """An integration event as a consumer sees it (SPEC §6 metadata headers)."""

    message_id: uuid.UUID
    topic: str
    event_type: str
    version: int
    aggregate_type: str
    aggregate_id: str
    created_at: datetime
    payload: Mapping[str, Any]
    trace_headers: Mapping[str, str] = field(default_factory=dict)

    def headers(self) -> dict[str, str]:
        """The Kafka headers: one per metadata field, plus ``traceparent`` when present."""
        headers = {
            "MessageId": str(self.message_id),
            "EventType": self.event_type,
            "Version": str(self.version),
            "CreatedAt": self.created_at.isoformat(),
            "AggregateId": self.aggregate_id,
            "AggregateType": self.aggregate_type,
        }
        if TRACEPARENT in self.trace_headers:
            headers[TRACEPARENT] = self.trace_headers[TRACEPARENT]
        return headers

    def value(self) -> bytes:
        """The Kafka value: the payload alone."""
        return json.dumps(self.payload, separators=(",", ":")).encode()


def from_outbox_row(row: asyncpg.Record) -> Message:
    return Message(
        message_id=row["message_id"],
        topic=row["topic"],
        event_type=row["event_type"],
        version=row["version"],
        aggregate_type=row["aggregate_type"],
        aggregate_id=row["aggregate_id"],
        created_at=row["created_at"],
        payload=row["payload"],
        trace_headers=row["headers"],
    )


class MalformedMessage(ValueError):
    """A Kafka record without the metadata headers SPEC §6 requires."""


def from_kafka_record(
    topic: str, headers: Sequence[tuple[str, bytes | None]] | None, value: bytes | None
) -> Message:
    """Rebuild the message from a Kafka record; raises :class:`MalformedMessage`."""
    found = {name: (raw or b"").decode() for name, raw in headers or ()}
    try:
        return Message(
            message_id=uuid.UUID(found["MessageId"]),
            topic=topic,
            event_type=found["EventType"],
            version=int(found["Version"]),
            aggregate_type=found["AggregateType"],
            aggregate_id=found["AggregateId"],
            created_at=datetime.fromisoformat(found["CreatedAt"]),
            payload=json.loads(value or b"null"),
            trace_headers={TRACEPARENT: found[TRACEPARENT]} if TRACEPARENT in found else {},
        )
    except (KeyError, ValueError) as exc:
        raise MalformedMessage(f"record on {topic} lacks valid metadata: {exc}") from exc

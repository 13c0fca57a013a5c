"""``dev-stats-session-ended``: seed 004's only required consumer.

Thin by design (STYLE 12): decode the payload, call the operation. First-seen by
MessageId is the runner's row; first-seen by SessionId is the fact table's key, and the day's
rollup counts a session only when its fact is new.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from pin_sessions.dev_stats.domain import SessionFact
from pin_sessions.dev_stats.operations import record_session_ended
from pin_sessions.platform.database import Connection
from pin_sessions.platform.messaging.envelope import Message

SESSION_ENDED_TOPIC = "pin.user-activity.session-ended.v1"


class SessionEndedConsumer:
    """Keeps one fact per ended session and counts it in its day's rollup for the summary."""

    consumer = "dev-stats-session-ended"
    topic = SESSION_ENDED_TOPIC
    version = 1

    async def handle(self, conn: Connection, message: Message, now: datetime) -> None:
        payload = message.payload
        user_id = payload.get("UserId")
        fact = SessionFact(
            session_id=uuid.UUID(payload["SessionId"]),
            message_id=message.message_id,
            anonymous_id=uuid.UUID(payload["AnonymousId"]),
            user_id=uuid.UUID(user_id) if user_id is not None else None,
            created_at=datetime.fromisoformat(payload["CreatedAt"]),
            last_activity_at=datetime.fromisoformat(payload["LastActivityAt"]),
            duration_seconds=int(payload["DurationSeconds"]),
        )
        await record_session_ended(conn, fact, now=now)

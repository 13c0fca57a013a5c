"""dev-stats's consumers, thin by design (STYLE 12): decode the payload, call the operation.

``dev-stats-session-ended``, seed 004's: first-seen by MessageId is the runner's row;
first-seen by SessionId is the fact table's key, and the day's rollup counts a session only
when its fact is new.

``dev-stats-user-erased`` (SPEC §10): the user's facts lose their ``user_id``, in bounded
batches before the message's transaction; counts and durations stay.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from pin_sessions.dev_stats.domain import SessionFact
from pin_sessions.dev_stats.recording import record_session_ended
from pin_sessions.dev_stats.user_data import erase_user
from pin_sessions.platform.database import Connection, Database
from pin_sessions.platform.erasure import USER_ERASED_TOPIC, delete_dead_letters_of_user
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


class UserErasedConsumer:
    """Takes the erased user's id off their facts, and keeps a tombstone."""

    consumer = "dev-stats-user-erased"
    topic = USER_ERASED_TOPIC
    version = 1

    def __init__(self, batch_size: int) -> None:
        # Facts cleared per transaction (PIN_CONSUMERS__ERASURE_BATCH_SIZE).
        self.batch_size = batch_size

    async def prepare(self, database: Database, message: Message, now: datetime) -> None:
        user_id = uuid.UUID(message.payload["UserId"])
        await erase_user(database, user_id, now, batch_size=self.batch_size)

    async def handle(self, conn: Connection, message: Message, now: datetime) -> None:
        # What this context's consumers parked about the user goes too.
        await delete_dead_letters_of_user(
            conn, [SessionEndedConsumer.consumer], message.payload["UserId"]
        )

"""User-activity's consumers, thin by design (STYLE 12): decode, call the operation.

``identity-signed-in`` (``pin.identity.sign-ins.v1``): the link operation (INV-SES-002) in
the runner's transaction, where the first-seen row by MessageId is written too. A sign-in
without an ``AnonymousId`` concerns no device, so nothing happens. A late sign-in, older
than the device's current session, changes nothing (SPEC §6): it is logged and counted. A
sign-in of a user erased since changes nothing either (SPEC §10).

``user-activity-user-erased`` (``pin.identity.user-erased.v1``): everything of the user
goes, in bounded batches before the message's transaction (``user_data.erase_user``).
"""

from __future__ import annotations

import uuid
from datetime import datetime

import structlog
from prometheus_client import CollectorRegistry, Counter

from pin_sessions.platform.database import Connection, Database
from pin_sessions.platform.erasure import USER_ERASED_TOPIC, delete_dead_letters_of_user
from pin_sessions.platform.messaging.envelope import Message
from pin_sessions.user_activity.linking import link_sign_in
from pin_sessions.user_activity.user_data import erase_user, is_erased

SIGN_INS_TOPIC = "pin.identity.sign-ins.v1"

log = structlog.get_logger(__name__)


class SignedInConsumer:
    """Links the signing-in device's Active session to the user."""

    consumer = "identity-signed-in"
    topic = SIGN_INS_TOPIC
    version = 1

    def __init__(self, registry: CollectorRegistry) -> None:
        # Counted in the handler's transaction: a batch that rolls back and is applied again
        # message by message counts its stale sign-ins again. The counter says that late
        # sign-ins happen and roughly how often, which is what an operator acts on.
        self._stale = Counter(
            "user_activity_stale_sign_ins_total",
            "Sign-in events older than the device's current session, left without effect",
            registry=registry,
        )

    async def handle(self, conn: Connection, message: Message, now: datetime) -> None:
        payload = message.payload
        anonymous_id = payload.get("AnonymousId")
        if anonymous_id is None:
            return
        user_id = uuid.UUID(payload["UserId"])
        if await is_erased(conn, user_id):
            log.info("sign-in of an erased user ignored", messageId=str(message.message_id))
            return
        signed_in_at = datetime.fromisoformat(payload["SignedInAt"])
        outcome = await link_sign_in(conn, uuid.UUID(anonymous_id), user_id, signed_in_at, now)
        if outcome is not None and outcome.stale:
            self._stale.inc()
            log.info(
                "stale sign-in ignored",
                messageId=str(message.message_id),
                userId=str(user_id),
                sessionId=str(outcome.session.id),
                signedInAt=signed_in_at.isoformat(),
            )


class UserErasedConsumer:
    """Deletes the erased user's sessions, views and actions, and keeps a tombstone."""

    consumer = "user-activity-user-erased"
    topic = USER_ERASED_TOPIC
    version = 1

    def __init__(self, batch_size: int) -> None:
        # Rows deleted per transaction (PIN_CONSUMERS__ERASURE_BATCH_SIZE).
        self.batch_size = batch_size

    async def prepare(self, database: Database, message: Message, now: datetime) -> None:
        user_id = uuid.UUID(message.payload["UserId"])
        deleted = await erase_user(database, user_id, now, batch_size=self.batch_size)
        log.info("user erased", messageId=str(message.message_id), rowsDeleted=deleted)

    async def handle(self, conn: Connection, message: Message, now: datetime) -> None:
        # What this context's consumers parked about the user goes too.
        await delete_dead_letters_of_user(
            conn, [SignedInConsumer.consumer], message.payload["UserId"]
        )

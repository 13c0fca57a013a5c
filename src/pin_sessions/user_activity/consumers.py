"""``identity-signed-in``: user-activity's consumer of ``pin.identity.sign-ins.v1``.

Thin by design (STYLE 12): decode, call the link operation (INV-SES-002) in the runner's
transaction, where the first-seen row by MessageId is written too. A sign-in without an
``AnonymousId`` concerns no device, so nothing happens.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from pin_sessions.platform.database import Connection
from pin_sessions.platform.messaging.envelope import Message
from pin_sessions.user_activity.linking import link_device

SIGN_INS_TOPIC = "pin.identity.sign-ins.v1"


class SignedInConsumer:
    """Links the signing-in device's Active session to the user."""

    consumer = "identity-signed-in"
    topic = SIGN_INS_TOPIC
    version = 1

    async def handle(self, conn: Connection, message: Message, now: datetime) -> None:
        anonymous_id = message.payload.get("AnonymousId")
        if anonymous_id is None:
            return
        user_id = uuid.UUID(message.payload["UserId"])
        await link_device(conn, uuid.UUID(anonymous_id), user_id, now)

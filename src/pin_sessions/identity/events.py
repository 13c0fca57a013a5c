"""Identity's integration events (SPEC §6): flat PascalCase payloads, no personal data."""

from __future__ import annotations

import uuid
from datetime import datetime

from pin_sessions.identity.domain import RevokedReason
from pin_sessions.platform.erasure import USER_ERASED_TOPIC
from pin_sessions.platform.outbox import IntegrationEvent

SIGN_INS_TOPIC = "pin.identity.sign-ins.v1"
SESSION_REVOKED_TOPIC = "pin.identity.session-revoked.v1"


def user_signed_in(
    user_id: uuid.UUID,
    session_id: uuid.UUID,
    anonymous_id: uuid.UUID | None,
    signed_in_at: datetime,
) -> IntegrationEvent:
    return IntegrationEvent.on_topic(
        SIGN_INS_TOPIC,
        aggregate_type="User",
        aggregate_id=user_id,
        # AnonymousId is nullable, not optional: the key is always there (null without header).
        payload={
            "UserId": user_id,
            "RefreshSessionId": session_id,
            "AnonymousId": anonymous_id,
            "SignedInAt": signed_in_at,
        },
    )


def session_revoked(
    session_id: uuid.UUID, user_id: uuid.UUID, revoked_at: datetime, reason: RevokedReason
) -> IntegrationEvent:
    return IntegrationEvent.on_topic(
        SESSION_REVOKED_TOPIC,
        aggregate_type="RefreshSession",
        aggregate_id=session_id,
        payload={
            "RefreshSessionId": session_id,
            "UserId": user_id,
            "RevokedAt": revoked_at,
            "Reason": reason.value,
        },
    )


def user_erased(user_id: uuid.UUID, erased_at: datetime) -> IntegrationEvent:
    """SPEC §10: every other context deletes or anonymises what it holds of the user."""
    return IntegrationEvent.on_topic(
        USER_ERASED_TOPIC,
        aggregate_type="User",
        aggregate_id=user_id,
        payload={"UserId": user_id, "ErasedAt": erased_at},
    )

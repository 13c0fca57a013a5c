"""Integration events of user-activity, built from the Session's domain events.

Each payload is exactly its contract's (``contracts/``). Device data (user agent, IP
address) never enters an event.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

from pin_sessions.platform.outbox import IntegrationEvent
from pin_sessions.user_activity.domain import (
    EndedSession,
    SessionLinked,
    duration_seconds,
)

SESSION_LINKED_TOPIC = "pin.user-activity.session-linked.v1"
SESSION_ENDED_TOPIC = "pin.user-activity.session-ended.v1"
PROPERTY_OBJECT_VIEW_ENDED_TOPIC = "pin.user-activity.property-object-view-ended.v1"


def session_linked(linked: SessionLinked) -> IntegrationEvent:
    """session-linked, from the domain event: ``LinkedAt`` is the moment of linking."""
    return IntegrationEvent.on_topic(
        SESSION_LINKED_TOPIC,
        aggregate_type="Session",
        aggregate_id=linked.session_id,
        payload={
            "SessionId": linked.session_id,
            "AnonymousId": linked.anonymous_id,
            "UserId": linked.user_id,
            "LinkedAt": linked.linked_at,
        },
    )


def session_ended(session: EndedSession) -> IntegrationEvent:
    """session-ended, from the SessionEnded its close raised and the snapshot it left.

    Exactly the contract's payload: nothing about the device, no EndedAt, Status or LinkedAt.
    """
    ended = session.ended()
    return IntegrationEvent.on_topic(
        SESSION_ENDED_TOPIC,
        aggregate_type="Session",
        aggregate_id=session.id,
        payload={
            "SessionId": session.id,
            "AnonymousId": session.anonymous_id,
            "UserId": session.user_id,
            "CreatedAt": session.created_at,
            "LastActivityAt": session.last_activity_at,
            "DurationSeconds": duration_seconds(ended.duration),
        },
    )


def property_object_view_ended(
    *,
    view_id: uuid.UUID,
    session_id: uuid.UUID,
    property_object_id: uuid.UUID,
    user_id: uuid.UUID | None,
    started_at: datetime,
    ended_at: datetime,
    duration: timedelta,
) -> IntegrationEvent:
    """``user_id`` is the session's user when the view ended, not the view's snapshot."""
    return IntegrationEvent.on_topic(
        PROPERTY_OBJECT_VIEW_ENDED_TOPIC,
        aggregate_type="PropertyObjectView",
        aggregate_id=view_id,
        payload={
            "ViewId": view_id,
            "SessionId": session_id,
            "PropertyObjectId": property_object_id,
            "UserId": user_id,
            "StartedAt": started_at,
            "EndedAt": ended_at,
            "DurationSeconds": duration_seconds(duration),
        },
    )

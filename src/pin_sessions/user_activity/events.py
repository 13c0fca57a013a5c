"""Integration events of user-activity with the exact payloads of SPEC §6.

Device data (user agent, IP address) never enters an event.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

from pin_sessions.platform.outbox import IntegrationEvent
from pin_sessions.user_activity.domain import duration_seconds

SESSION_LINKED_TOPIC = "pin.user-activity.session-linked.v1"
SESSION_ENDED_TOPIC = "pin.user-activity.session-ended.v1"
PROPERTY_OBJECT_VIEW_ENDED_TOPIC = "pin.user-activity.property-object-view-ended.v1"


def session_linked(
    *, session_id: uuid.UUID, anonymous_id: uuid.UUID, user_id: uuid.UUID, linked_at: datetime
) -> IntegrationEvent:
    return IntegrationEvent.on_topic(
        SESSION_LINKED_TOPIC,
        aggregate_type="Session",
        aggregate_id=session_id,
        payload={
            "SessionId": session_id,
            "AnonymousId": anonymous_id,
            "UserId": user_id,
            "LinkedAt": linked_at,
        },
    )


def session_ended(
    *,
    session_id: uuid.UUID,
    anonymous_id: uuid.UUID,
    user_id: uuid.UUID | None,
    created_at: datetime,
    last_activity_at: datetime,
    duration: timedelta,
) -> IntegrationEvent:
    """Exactly seed 004's payload: nothing about the device, no EndedAt, Status or LinkedAt."""
    return IntegrationEvent.on_topic(
        SESSION_ENDED_TOPIC,
        aggregate_type="Session",
        aggregate_id=session_id,
        payload={
            "SessionId": session_id,
            "AnonymousId": anonymous_id,
            "UserId": user_id,
            "CreatedAt": created_at,
            "LastActivityAt": last_activity_at,
            "DurationSeconds": duration_seconds(duration),
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

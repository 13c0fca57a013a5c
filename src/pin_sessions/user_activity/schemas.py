"""Request and response bodies of the Session API (SPEC §4), camelCase on the wire.

Request bodies forbid unknown fields, so a client can never send a timestamp
(INV-SES-004): only the server clock sets times.
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel

from pin_sessions.platform.http.openapi import example
from pin_sessions.platform.http.validation import documented_pattern, pattern_check
from pin_sessions.user_activity.domain import (
    ACTION_DATA_MAX_BYTES,
    ACTION_TYPE_IN_WORDS,
    ACTION_TYPE_PATTERN,
    action_data_fits,
    has_nul_character,
)

HISTORY_ACTION = {
    "actionId": "01a252d9-1b22-7d4f-9f3c-5e7a9b1d3f52",
    "type": "favorites.add",
    "propertyObjectId": "0b7f8c3e-6a52-4c1e-9d1a-5f0c2a7e4b11",
    "data": {"source": "card"},
    "userId": None,
    "createdAt": "2026-12-07T12:01:30Z",
}
HISTORY_VIEW = {
    "viewId": "01a252d9-0a11-7c3e-8e2b-4d6f8a0c2e41",
    "propertyObjectId": "0b7f8c3e-6a52-4c1e-9d1a-5f0c2a7e4b11",
    "userId": "3f0b1e52-7c1d-4a8e-9b6f-2d5c8e1a4b70",
    "startedAt": "2026-12-07T12:03:00Z",
    "endedAt": "2026-12-07T12:04:35Z",
    "durationSeconds": 95,
}
HISTORY_SESSION = {
    "sessionId": "01a252d8-d4cc-7d8a-a9c5-adbfee5252f0",
    "anonymousId": "01a252d8-d46b-739b-828c-03f550cb6f96",
    "userId": "3f0b1e52-7c1d-4a8e-9b6f-2d5c8e1a4b70",
    "linkedAt": "2026-12-07T12:02:00Z",
    "status": "Inactive",
    "createdAt": "2026-12-07T12:00:00Z",
    "lastActivityAt": "2026-12-07T12:04:35Z",
    "endedAt": "2026-12-07T12:20:00Z",
    "durationSeconds": 275,
    "device": {"type": "Mobile", "os": "iOS 18", "browser": "Mobile Safari 18"},
    "actions": [HISTORY_ACTION],
    "views": [HISTORY_VIEW],
}
# What an export of the caller's activity looks like (exportMyActivity).
EXPORT_EXAMPLE = {
    "userId": "3f0b1e52-7c1d-4a8e-9b6f-2d5c8e1a4b70",
    "exportedAt": "2026-12-07T13:00:00Z",
    "sessions": [
        {
            "sessionId": "01a252d8-d4cc-7d8a-a9c5-adbfee5252f0",
            "anonymousId": "01a252d8-d46b-739b-828c-03f550cb6f96",
            "status": "Inactive",
            "createdAt": "2026-12-07T12:00:00Z",
            "lastActivityAt": "2026-12-07T12:04:35Z",
            "linkedAt": "2026-12-07T12:02:00Z",
            "endedAt": "2026-12-07T12:20:00Z",
            "durationSeconds": 275,
            "device": {
                "type": "Mobile",
                "os": "iOS 18",
                "browser": "Mobile Safari 18",
                "userAgent": "Mozilla/5.0 (iPhone; CPU iPhone OS 18_0 like Mac OS X) ...",
                "ipAddress": "198.51.100.0/24",
            },
            "propertyViews": [],
            "actions": [],
        }
    ],
}


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, frozen=True)


class _Response(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)


class StartRequest(_Request):
    """No fields: send no body, or `{}`; the device is read from the request."""

    model_config = example({})


class HeartbeatRequest(_Request):
    """No fields: send no body, or `{}`; the server's clock sets the time."""

    model_config = example({})


class LinkRequest(_Request):
    """No fields: the caller and the device come from the credentials and the header."""

    model_config = example({})


class EndViewRequest(_Request):
    """No fields: the server's clock ends the view."""

    model_config = example({})


class ActionRequest(_Request):
    """What the visitor did: a type, optionally the property object, and up to 8 KiB of
    JSON data."""

    model_config = example(
        {
            "type": "favorites.add",
            "propertyObjectId": "0b7f8c3e-6a52-4c1e-9d1a-5f0c2a7e4b11",
            "data": {"source": "card"},
        }
    )

    type: Annotated[
        str,
        pattern_check(ACTION_TYPE_PATTERN.pattern, ACTION_TYPE_IN_WORDS),
        documented_pattern(ACTION_TYPE_PATTERN.pattern),
        Field(max_length=64, description="What the visitor did, e.g. `favorites.add`"),
    ]
    property_object_id: uuid.UUID | None = None
    data: Any = None

    @field_validator("data")
    @classmethod
    def _bounded(cls, value: Any) -> Any:
        try:
            # Python's JSON reader takes NaN, Infinity and 1e400 (a float overflowing to
            # infinity); JSON and jsonb have no such numbers.
            encoded = json.dumps(
                value, separators=(",", ":"), ensure_ascii=False, allow_nan=False
            ).encode()
        except ValueError:
            raise ValueError("data must hold finite numbers only") from None
        if not action_data_fits(encoded):
            raise ValueError(f"data must be at most {ACTION_DATA_MAX_BYTES} bytes of JSON")
        if has_nul_character(value):
            raise ValueError("data must not contain the character U+0000")
        return value


class PropertyViewRequest(_Request):
    """The property object the visitor opened."""

    model_config = example({"propertyObjectId": "0b7f8c3e-6a52-4c1e-9d1a-5f0c2a7e4b11"})

    property_object_id: uuid.UUID


class SessionStarted(_Response):
    """The device's session; `created` when this start opened it. Keep `anonymousId`: it is
    the device's `X-Anonymous-Id` from now on."""

    model_config = example(
        {
            "sessionId": "01a252d8-d4cc-7d8a-a9c5-adbfee5252f0",
            "anonymousId": "01a252d8-d46b-739b-828c-03f550cb6f96",
            "userId": None,
            "status": "Active",
            "createdAt": "2026-12-07T12:00:00Z",
            "lastActivityAt": "2026-12-07T12:00:00Z",
            "created": True,
        }
    )

    session_id: uuid.UUID
    anonymous_id: uuid.UUID
    user_id: uuid.UUID | None
    status: str
    created_at: datetime
    last_activity_at: datetime
    created: bool


class HeartbeatAccepted(_Response):
    """The device's session now; `restarted` when the old one had ended and this one began."""

    model_config = example(
        {
            "sessionId": "01a252d8-d4cc-7d8a-a9c5-adbfee5252f0",
            "lastActivityAt": "2026-12-07T12:01:00Z",
            "restarted": False,
        }
    )

    session_id: uuid.UUID
    last_activity_at: datetime
    restarted: bool


class SessionLinked(_Response):
    """The device's session after a link; a stale link leaves it as it was."""

    model_config = example(
        {
            "sessionId": "01a252d8-d4cc-7d8a-a9c5-adbfee5252f0",
            "userId": "3f0b1e52-7c1d-4a8e-9b6f-2d5c8e1a4b70",
            "linkedAt": "2026-12-07T12:02:00Z",
            "switched": False,
        }
    )

    session_id: uuid.UUID
    user_id: uuid.UUID | None = Field(
        description="The session's user: the caller, unless the link was stale (then another "
        "user's, or null for a guest's session)"
    )
    linked_at: datetime | None = Field(
        description="When the session was linked to its user; null for a guest's session"
    )
    switched: bool
    stale: bool = Field(
        default=False,
        description="Present, and true, only when another user signed in on the device after "
        "the caller and linked it: the link changed nothing",
    )


class ActionRecorded(_Response):
    """The recorded action, and the session it was recorded in."""

    model_config = example(
        {
            "actionId": "01a252d9-1b22-7d4f-9f3c-5e7a9b1d3f52",
            "sessionId": "01a252d8-d4cc-7d8a-a9c5-adbfee5252f0",
        }
    )

    action_id: uuid.UUID
    session_id: uuid.UUID


class ViewStarted(_Response):
    """The started view: end it with its `viewId`."""

    model_config = example(
        {
            "viewId": "01a252d9-0a11-7c3e-8e2b-4d6f8a0c2e41",
            "sessionId": "01a252d8-d4cc-7d8a-a9c5-adbfee5252f0",
            "startedAt": "2026-12-07T12:03:00Z",
        }
    )

    view_id: uuid.UUID
    session_id: uuid.UUID
    started_at: datetime


class ViewEnded(_Response):
    """The ended view and how long it lasted."""

    model_config = example(
        {"viewId": "01a252d9-0a11-7c3e-8e2b-4d6f8a0c2e41", "durationSeconds": 95}
    )

    view_id: uuid.UUID
    duration_seconds: int


class OpenSessions(_Response):
    """How many sessions are open, and when they were counted."""

    model_config = example({"openSessions": 118, "countedAt": "2026-12-07T12:00:00Z"})

    open_sessions: int
    counted_at: datetime


class DeviceLink(_Response):
    """The user a device is linked to now; nulls while no one has signed in on it."""

    model_config = example(
        {
            "anonymousId": "01a252d8-d46b-739b-828c-03f550cb6f96",
            "userId": "3f0b1e52-7c1d-4a8e-9b6f-2d5c8e1a4b70",
            "linkedAt": "2026-12-07T12:02:00Z",
        }
    )

    anonymous_id: uuid.UUID
    user_id: uuid.UUID | None
    linked_at: datetime | None


class Device(_Response):
    """Parsed device facts only: never the IP address or the raw user agent."""

    model_config = example({"type": "Mobile", "os": "iOS 18", "browser": "Mobile Safari 18"})

    type: str
    os: str | None
    browser: str | None


class HistoryAction(_Response):
    """An action of a session, with the user it was recorded for (null: before sign-in)."""

    model_config = example(HISTORY_ACTION)

    action_id: uuid.UUID
    type: str
    property_object_id: uuid.UUID | None
    data: Any
    user_id: uuid.UUID | None
    created_at: datetime


class HistoryView(_Response):
    """A property view of a session; `endedAt` and `durationSeconds` null while open."""

    model_config = example(HISTORY_VIEW)

    view_id: uuid.UUID
    property_object_id: uuid.UUID
    user_id: uuid.UUID | None
    started_at: datetime
    ended_at: datetime | None
    duration_seconds: int | None


class HistorySession(_Response):
    """A session with its latest 50 actions and views."""

    model_config = example(HISTORY_SESSION)

    session_id: uuid.UUID
    anonymous_id: uuid.UUID
    user_id: uuid.UUID | None
    linked_at: datetime | None
    status: str
    created_at: datetime
    last_activity_at: datetime
    ended_at: datetime | None
    duration_seconds: int | None
    device: Device
    actions: list[HistoryAction]
    views: list[HistoryView]


class History(_Response):
    """A page of sessions, newest first; `nextCursor` fetches the next, null at the end."""

    model_config = example({"items": [HISTORY_SESSION], "nextCursor": None})

    items: list[HistorySession]
    next_cursor: str | None

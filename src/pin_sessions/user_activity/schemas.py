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

from pin_sessions.platform.http.validation import documented_pattern, pattern_check
from pin_sessions.user_activity.domain import (
    ACTION_DATA_MAX_BYTES,
    ACTION_TYPE_IN_WORDS,
    ACTION_TYPE_PATTERN,
    action_data_fits,
    has_nul_character,
)


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, frozen=True)


class _Response(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)


class StartRequest(_Request):
    """No fields: the server decides every time and reads the device from the request."""


class HeartbeatRequest(_Request):
    """No fields: the server decides every time."""


class LinkRequest(_Request):
    """No fields: the caller and the device come from the credentials and the header."""


class EndViewRequest(_Request):
    """No fields: the server's clock ends the view."""


class ActionRequest(_Request):
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
    property_object_id: uuid.UUID


class SessionStarted(_Response):
    session_id: uuid.UUID
    anonymous_id: uuid.UUID
    user_id: uuid.UUID | None
    status: str
    created_at: datetime
    last_activity_at: datetime
    created: bool


class HeartbeatAccepted(_Response):
    session_id: uuid.UUID
    last_activity_at: datetime
    restarted: bool


class SessionLinked(_Response):
    """The device's session after a link; a stale link (SPEC §11) leaves it as it was."""

    session_id: uuid.UUID
    user_id: uuid.UUID | None = Field(
        description="The session's user: the caller, unless the link was stale (then another "
        "user's, or null for a guest's session)"
    )
    linked_at: datetime | None = Field(
        description="The instant of the sign-in the session's link stands for (for a link by "
        "this route, the token's auth_time); null for a guest's session"
    )
    switched: bool
    stale: bool = Field(
        default=False,
        description="Present, and true, only when another user signed in on the device after "
        "the caller and linked it: the link changed nothing",
    )


class ActionRecorded(_Response):
    action_id: uuid.UUID
    session_id: uuid.UUID


class ViewStarted(_Response):
    view_id: uuid.UUID
    session_id: uuid.UUID
    started_at: datetime


class ViewEnded(_Response):
    view_id: uuid.UUID
    duration_seconds: int


class OpenSessions(_Response):
    open_sessions: int
    counted_at: datetime


class DeviceLink(_Response):
    anonymous_id: uuid.UUID
    user_id: uuid.UUID | None
    linked_at: datetime | None


class Device(_Response):
    """Parsed device facts only: never the IP address or the raw user agent."""

    type: str
    os: str | None
    browser: str | None


class HistoryAction(_Response):
    action_id: uuid.UUID
    type: str
    property_object_id: uuid.UUID | None
    data: Any
    user_id: uuid.UUID | None
    created_at: datetime


class HistoryView(_Response):
    view_id: uuid.UUID
    property_object_id: uuid.UUID
    user_id: uuid.UUID | None
    started_at: datetime
    ended_at: datetime | None
    duration_seconds: int | None


class HistorySession(_Response):
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
    items: list[HistorySession]
    next_cursor: str | None

"""The Session aggregate's states and rules (seed 003); no I/O here.

DeviceInfo is parsed once, when a session is created, and never updated.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from pin_sessions.platform.devices import DeviceType, parse_user_agent, truncate_user_agent

ACTION_TYPE_PATTERN = re.compile(r"^[a-z0-9._-]{1,64}$")
ACTION_DATA_MAX_BYTES = 8 * 1024


class SessionStatus(StrEnum):
    ACTIVE = "Active"
    INACTIVE = "Inactive"


@dataclass(frozen=True)
class DeviceInfo:
    """The device of a session; ``ip_address`` is quasi-PII: stored, never shown or published."""

    user_agent: str
    device_type: DeviceType
    os: str | None
    browser: str | None
    ip_address: str | None


@dataclass(frozen=True)
class SessionSnapshot:
    """The public state of one session, as a statement returned it."""

    id: uuid.UUID
    anonymous_id: uuid.UUID
    user_id: uuid.UUID | None
    linked_at: datetime | None
    status: SessionStatus
    created_at: datetime
    last_activity_at: datetime


@dataclass(frozen=True, slots=True)
class ExtendedSession:
    """A session a heartbeat extended: all its answer tells."""

    id: uuid.UUID
    last_activity_at: datetime


def device_info(user_agent: str | None, ip_address: str | None) -> DeviceInfo:
    """Parse the request's user agent once; the stored text is cut to its column's length."""
    text = truncate_user_agent(user_agent)
    parsed = parse_user_agent(text)
    return DeviceInfo(text, parsed.device_type, parsed.os, parsed.browser, ip_address)


def duration_seconds(duration: timedelta) -> int:
    """Whole seconds of a duration, as events and responses carry it."""
    return int(duration.total_seconds())


def open_or_duration_seconds(duration: timedelta | None) -> int | None:
    """``duration_seconds``, or None for a session or view not ended yet."""
    return None if duration is None else duration_seconds(duration)


def action_data_fits(encoded: bytes) -> bool:
    """Action data is bounded (SPEC §5): at most 8 KiB of JSON."""
    return len(encoded) <= ACTION_DATA_MAX_BYTES


def has_nul_character(value: object) -> bool:
    """True when any string in ``value``, key or item, holds U+0000: jsonb cannot store it."""
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(has_nul_character(key) or has_nul_character(item) for key, item in value.items())
    if isinstance(value, list):
        return any(has_nul_character(item) for item in value)
    return False

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


@dataclass(frozen=True)
class SignedInCaller:
    """A request's user, and when the sign-in behind its token happened (SPEC §11).

    ``signed_in_at`` is the token's auth_time: the instant every link is ordered by, so
    that the latest sign-in owns the device whatever order requests and events arrive in.
    """

    user_id: uuid.UUID
    signed_in_at: datetime


@dataclass(frozen=True)
class DeviceLink:
    """One link of a device's history: whose, and the instant of the sign-in it stands for."""

    user_id: uuid.UUID
    linked_at: datetime


def is_stale_request(caller: SignedInCaller, latest_since: DeviceLink | None) -> bool:
    """SPEC §11: another user linked the device after the caller's sign-in.

    ``latest_since`` is the device's latest link later than ``caller.signed_in_at``. The
    caller's own later link (a newer sign-in of the same user) makes their token no stranger.
    """
    return latest_since is not None and latest_since.user_id != caller.user_id


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

"""The Session aggregate's states, rules and domain events; no I/O here.

DeviceInfo is parsed once, when a session is created, and never updated. The Session's
operations (its statements in ``repository.sessions``) raise the domain events below from
the rows they wrote; the integration events (``events``) and the ``session started`` log
event are built from them.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from pin_sessions.platform.devices import DeviceType, parse_user_agent, truncate_user_agent
from pin_sessions.user_activity.errors import SessionAlreadyEnded

ACTION_TYPE_PATTERN = re.compile(r"^[a-z0-9._-]{1,64}$")
ACTION_TYPE_IN_WORDS = "1 to 64 lower-case letters, digits, '.', '_' or '-', e.g. favorites.add"
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
    # When the session was linked to ``user_id`` (the linking transaction's now)…
    linked_at: datetime | None
    # …and when the sign-in that linked it happened: the key sign-ins are ordered by.
    signed_in_at: datetime | None
    status: SessionStatus
    created_at: datetime
    last_activity_at: datetime

    def ensure_active(self) -> None:
        """INV-SES-006: an Inactive session never changes again."""
        if self.status is not SessionStatus.ACTIVE:
            raise SessionAlreadyEnded()

    def started(self) -> SessionStarted:
        """The domain event of this session's creation."""
        return SessionStarted(self.id, self.anonymous_id, self.user_id)

    def linked(self) -> SessionLinked:
        """The domain event of this session's link: ``user_id`` null → value (INV-SES-002)."""
        if self.user_id is None or self.linked_at is None:
            raise ValueError("an unlinked session raises no SessionLinked")
        return SessionLinked(self.id, self.anonymous_id, self.user_id, self.linked_at)


@dataclass(frozen=True, slots=True)
class SessionStarted:
    """A session was created (seed 003's SessionStartedEvent)."""

    session_id: uuid.UUID
    anonymous_id: uuid.UUID
    user_id: uuid.UUID | None


@dataclass(frozen=True, slots=True)
class SessionLinked:
    """A session got its user, once (SessionLinkedEvent)."""

    session_id: uuid.UUID
    anonymous_id: uuid.UUID
    user_id: uuid.UUID
    linked_at: datetime


@dataclass(frozen=True, slots=True)
class SessionEnded:
    """A session went Active → Inactive, with its duration (SessionEndedEvent)."""

    session_id: uuid.UUID
    duration: timedelta


@dataclass(frozen=True, slots=True)
class EndedSession:
    """The snapshot of a session as its close left it: what session-ended carries."""

    id: uuid.UUID
    anonymous_id: uuid.UUID
    user_id: uuid.UUID | None
    created_at: datetime
    last_activity_at: datetime
    duration: timedelta

    def ended(self) -> SessionEnded:
        """INV-SES-005: the close computed ``duration = last_activity_at - created_at``."""
        return SessionEnded(self.id, self.duration)


@dataclass(frozen=True)
class SignedInCaller:
    """A request's user, and when the sign-in behind its token happened.

    ``signed_in_at`` is the token's auth_time: the instant every link is ordered by, so
    that the latest sign-in owns the device whatever order requests and events arrive in.
    """

    user_id: uuid.UUID
    signed_in_at: datetime


@dataclass(frozen=True)
class DeviceLink:
    """One link of a device's history: whose, and the instant of the sign-in it stands for."""

    user_id: uuid.UUID
    signed_in_at: datetime


def is_stale_request(caller: SignedInCaller, latest_since: DeviceLink | None) -> bool:
    """Another user linked the device after the caller's sign-in.

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

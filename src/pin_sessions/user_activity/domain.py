"""The Session aggregate's states and rules (seed 003); no I/O here.

DeviceInfo is parsed once, when a session is created, and never updated.
"""

from __future__ import annotations

import ipaddress
import re
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from functools import lru_cache
from typing import Any

from ua_parser import parse

USER_AGENT_MAX_LENGTH = 1024
DEVICE_TEXT_MAX_LENGTH = 128
ACTION_TYPE_PATTERN = re.compile(r"^[a-z0-9._-]{1,64}$")
ACTION_DATA_MAX_BYTES = 8 * 1024

_DESKTOP_OS_FAMILIES = frozenset(
    {"Windows", "Mac OS X", "macOS", "Linux", "Ubuntu", "Fedora", "Chrome OS", "FreeBSD"}
)
_MOBILE_OS_FAMILIES = frozenset({"iOS", "Android", "Windows Phone", "BlackBerry OS", "KaiOS"})


class SessionStatus(StrEnum):
    ACTIVE = "Active"
    INACTIVE = "Inactive"


class DeviceType(StrEnum):
    DESKTOP = "Desktop"
    MOBILE = "Mobile"
    TABLET = "Tablet"
    BOT = "Bot"
    UNKNOWN = "Unknown"


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


def device_info(user_agent: str | None, ip_address: str | None) -> DeviceInfo:
    """Parse the request's user agent once; the stored text is cut to its column's length."""
    text = (user_agent or "")[:USER_AGENT_MAX_LENGTH]
    device_type, os, browser = _parsed(text)
    return DeviceInfo(text, device_type, os, browser, ip_address)


# The same few user agents repeat endlessly; parsing one costs about a millisecond.
@lru_cache(maxsize=4096)
def _parsed(user_agent: str) -> tuple[DeviceType, str | None, str | None]:
    if not user_agent:
        return DeviceType.UNKNOWN, None, None
    result = parse(user_agent)
    os = _labelled(result.os.family, result.os.major) if result.os else None
    browser = (
        _labelled(result.user_agent.family, result.user_agent.major) if result.user_agent else None
    )
    return _device_type(user_agent, result), os, browser


def _labelled(family: str, major: str | None) -> str | None:
    if not family or family == "Other":
        return None
    label = f"{family} {major}" if major else family
    return label[:DEVICE_TEXT_MAX_LENGTH]


def _device_type(user_agent: str, result: Any) -> DeviceType:
    device_family = result.device.family if result.device else ""
    device_brand = (result.device.brand or "") if result.device else ""
    os_family = result.os.family if result.os else ""
    if device_family == "Spider" or "bot" in user_agent.lower():
        return DeviceType.BOT
    if device_family == "iPad" or "Tablet" in device_brand or "Tablet" in device_family:
        return DeviceType.TABLET
    # Android tablets announce themselves by leaving "Mobile" out of the user agent.
    if os_family == "Android" and "Mobile" not in user_agent:
        return DeviceType.TABLET
    if os_family in _MOBILE_OS_FAMILIES or device_family == "iPhone":
        return DeviceType.MOBILE
    if os_family in _DESKTOP_OS_FAMILIES:
        return DeviceType.DESKTOP
    return DeviceType.UNKNOWN


def duration_seconds(duration: timedelta) -> int:
    """Whole seconds of a duration, as events and responses carry it."""
    return int(duration.total_seconds())


Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def client_ip(
    peer: str | None, forwarded_for: Sequence[str], trusted_proxies: Iterable[Network]
) -> str | None:
    """The client's address: the peer, unless the peer is a trusted proxy.

    ``X-Forwarded-For`` is read right to left, skipping trusted proxies; the first
    untrusted hop is the client. Anything unparsable stops the walk, so a client can
    never choose its own address by writing the header.
    """
    networks = tuple(trusted_proxies)
    if peer is None or not _is_trusted(peer, networks):
        return peer
    current = peer
    for hop in reversed([part.strip() for value in forwarded_for for part in value.split(",")]):
        if not _is_address(hop):
            break
        current = hop
        if not _is_trusted(hop, networks):
            break
    return current


def _is_address(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def _is_trusted(address: str, networks: tuple[Network, ...]) -> bool:
    try:
        parsed = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(parsed in network for network in networks)


def action_data_fits(encoded: bytes) -> bool:
    """Action data is bounded (SPEC §5): at most 8 KiB of JSON."""
    return len(encoded) <= ACTION_DATA_MAX_BYTES

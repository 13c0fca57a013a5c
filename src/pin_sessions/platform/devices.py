"""What a user agent says about a device (seed 003 ``DeviceInfo``), for every context.

Parsed by ua-parser: DeviceType ``Desktop``/``Mobile``/``Tablet``/``Bot``/``Unknown``,
OS and browser labelled with their major version (``iOS 18``, ``Chrome 138``), or None
where the parser cannot tell.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache
from typing import Any

from ua_parser import parse

DEVICE_TEXT_MAX_LENGTH = 128
# Both contexts store the user agent in a varchar(1024) column (SPEC §3, seed 003).
USER_AGENT_MAX_LENGTH = 1024

_DESKTOP_OS_FAMILIES = frozenset(
    {"Windows", "Mac OS X", "macOS", "Linux", "Ubuntu", "Fedora", "Chrome OS", "FreeBSD"}
)
_MOBILE_OS_FAMILIES = frozenset({"iOS", "Android", "Windows Phone", "BlackBerry OS", "KaiOS"})


class DeviceType(StrEnum):
    DESKTOP = "Desktop"
    MOBILE = "Mobile"
    TABLET = "Tablet"
    BOT = "Bot"
    UNKNOWN = "Unknown"


@dataclass(frozen=True)
class ParsedDevice:
    device_type: DeviceType
    os: str | None
    browser: str | None


def truncate_user_agent(user_agent: str | None) -> str:
    """The request's user agent cut to the column's length; a missing one is empty."""
    return (user_agent or "")[:USER_AGENT_MAX_LENGTH]


# The same few user agents repeat endlessly; parsing one costs about a millisecond.
@lru_cache(maxsize=4096)
def parse_user_agent(user_agent: str) -> ParsedDevice:
    if not user_agent:
        return ParsedDevice(DeviceType.UNKNOWN, None, None)
    result = parse(user_agent)
    os = _labelled(result.os.family, result.os.major) if result.os else None
    browser = (
        _labelled(result.user_agent.family, result.user_agent.major) if result.user_agent else None
    )
    return ParsedDevice(_device_type(user_agent, result), os, browser)


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

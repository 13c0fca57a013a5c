"""What a stored user agent says about a device, for the device list (SPEC §4)."""

from __future__ import annotations

from dataclasses import dataclass

from ua_parser import parse

UNKNOWN = "Other"
_MOBILE_OS = frozenset({"iOS", "Android", "Windows Phone", "BlackBerry OS", "KaiOS"})
_DESKTOP_OS = frozenset({"Windows", "Mac OS X", "Linux", "Ubuntu", "Chrome OS", "Fedora"})
_TABLET_HINTS = ("ipad", "tablet", "kindle", "tab")


@dataclass(frozen=True)
class DeviceDescription:
    type: str  # mobile | tablet | desktop | bot | unknown
    os: str
    browser: str


def describe(user_agent: str) -> DeviceDescription:
    """Type, OS and browser by ua-parser; ``unknown`` / ``Other`` where it cannot tell."""
    result = parse(user_agent)
    os_family = result.os.family if result.os else UNKNOWN
    browser = result.user_agent.family if result.user_agent else UNKNOWN
    device_family = result.device.family if result.device else ""
    return DeviceDescription(_device_type(device_family, os_family), os_family, browser)


def _device_type(device_family: str, os_family: str) -> str:
    if device_family == "Spider":
        return "bot"
    if any(hint in device_family.lower() for hint in _TABLET_HINTS):
        return "tablet"
    if os_family in _MOBILE_OS:
        return "mobile"
    if os_family in _DESKTOP_OS:
        return "desktop"
    return "unknown"

"""What a stored user agent says about a device, for the device list (SPEC §4)."""

from __future__ import annotations

from dataclasses import dataclass

from pin_sessions.platform.devices import parse_user_agent


@dataclass(frozen=True)
class DeviceDescription:
    type: str  # Desktop | Mobile | Tablet | Bot | Unknown, as user-activity's DeviceInfo
    os: str | None
    browser: str | None


def describe(user_agent: str) -> DeviceDescription:
    """Type, OS and browser by ua-parser; None where it cannot tell."""
    parsed = parse_user_agent(user_agent)
    return DeviceDescription(parsed.device_type.value, parsed.os, parsed.browser)

"""DeviceInfo parsing and the client address rule, without I/O."""

from __future__ import annotations

from ipaddress import ip_network

import pytest

from pin_sessions.platform.devices import USER_AGENT_MAX_LENGTH, DeviceType
from pin_sessions.settings import SettingsError, load_settings
from pin_sessions.user_activity.domain import device_info
from tests.user_activity.conftest import IPHONE

WINDOWS_CHROME = (
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 "
    "(KHTML, like Gecko) Chrome/138.0.0.0 Safari/537.36"
)
IPAD = (
    "Mozilla/5.0 (iPad; CPU OS 17_5 like Mac OS X) AppleWebKit/605.1.15 "
    "(KHTML, like Gecko) Version/17.5 Mobile/15E148 Safari/604.1"
)
ANDROID_TABLET = (
    "Mozilla/5.0 (Linux; Android 13; SM-X700) AppleWebKit/537.36 "
    "(KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36"
)
GOOGLEBOT = "Googlebot/2.1 (+http://www.google.com/bot.html)"


@pytest.mark.parametrize(
    ("user_agent", "device_type", "os", "browser"),
    [
        (WINDOWS_CHROME, DeviceType.DESKTOP, "Windows 10", "Chrome 138"),
        (IPHONE, DeviceType.MOBILE, "iOS 18", "Mobile Safari 18"),
        (IPAD, DeviceType.TABLET, "iOS 17", "Mobile Safari 17"),
        (ANDROID_TABLET, DeviceType.TABLET, "Android 13", "Chrome 120"),
        (GOOGLEBOT, DeviceType.BOT, None, "Googlebot 2"),
        ("", DeviceType.UNKNOWN, None, None),
    ],
)
def test_device_info_is_parsed_from_the_user_agent(
    user_agent: str, device_type: DeviceType, os: str | None, browser: str | None
) -> None:
    device = device_info(user_agent, None)
    assert (device.device_type, device.os, device.browser) == (device_type, os, browser)


def test_the_user_agent_is_cut_to_its_column_length() -> None:
    device = device_info(WINDOWS_CHROME + "x" * 2000, None)
    assert len(device.user_agent) == USER_AGENT_MAX_LENGTH
    assert device.browser == "Chrome 138"


def test_trusted_proxies_are_read_as_a_list_or_json() -> None:
    listed = load_settings({"PIN_TRUSTED_PROXIES": "10.0.0.1, 192.168.0.0/16"})
    assert listed.trusted_proxies == (ip_network("10.0.0.1/32"), ip_network("192.168.0.0/16"))
    as_json = load_settings({"PIN_TRUSTED_PROXIES": '["::1"]'})
    assert as_json.trusted_proxies == (ip_network("::1/128"),)
    assert load_settings({}).trusted_proxies == ()


def test_a_bad_trusted_proxy_names_the_variable() -> None:
    with pytest.raises(SettingsError, match="PIN_TRUSTED_PROXIES 'nope' is not an IP address"):
        load_settings({"PIN_TRUSTED_PROXIES": "nope"})

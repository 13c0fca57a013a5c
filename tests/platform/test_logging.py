from __future__ import annotations

import json

import structlog

from pin_sessions.platform.logging import REDACTED, mask_ip, scrub_text
from tests.conftest import LogCapture


def test_ipv4_is_masked_to_its_slash_24() -> None:
    assert mask_ip("203.0.113.77") == "203.0.113.0/24"


def test_ipv6_is_masked_to_its_slash_48() -> None:
    assert mask_ip("2001:db8:abcd:12::1") == "2001:db8:abcd::/48"


def test_masking_twice_keeps_the_network() -> None:
    assert mask_ip(mask_ip("198.51.100.9")) == "198.51.100.0/24"


def test_anything_that_is_not_an_address_is_redacted_under_an_ip_key() -> None:
    assert mask_ip("not-an-ip") == REDACTED


def test_free_text_loses_tokens_phones_and_full_addresses() -> None:
    text = scrub_text(
        "from 203.0.113.77 via 2001:db8:abcd:12::1 phone +79991234567 "
        "token eyJhbGciOi.eyJzdWIiOi.c2lnbmF0dXJl at 21:17:39"
    )
    assert "203.0.113.77" not in text and "203.0.113.0/24" in text
    assert "2001:db8:abcd:12::1" not in text and "2001:db8:abcd::/48" in text
    assert "+79991234567" not in text
    assert "eyJhbGciOi" not in text
    assert "21:17:39" in text


def test_log_lines_drop_sensitive_keys_and_mask_ips(captured_logs: LogCapture) -> None:
    structlog.get_logger("t").info(
        "signed in",
        phoneNumber="+79991234567",
        code="123456",
        refreshToken="abc",
        userAgent="Mozilla/5.0",
        ipAddress="203.0.113.77",
        nested={"phone": "+15551234567", "ip": "2001:db8:abcd:12::1"},
    )
    line = json.loads(captured_logs.lines()[-1])
    assert line["event"] == "signed in"
    for key in ("phoneNumber", "code", "refreshToken", "userAgent"):
        assert line[key] == REDACTED
    assert line["ipAddress"] == "203.0.113.0/24"
    assert line["nested"] == {"phone": REDACTED, "ip": "2001:db8:abcd::/48"}
    assert "+79991234567" not in captured_logs.lines()[-1]

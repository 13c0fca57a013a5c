"""No log line carries a phone number, a code, a token or a full IP address (SPEC §7); the
one code in the logs is the development phone's (``PIN_ENV=dev``, the ``log`` gateway)."""

from __future__ import annotations

import ipaddress
import json
import re
from datetime import timedelta

import httpx

from pin_sessions.platform.clock import FixedClock
from tests.conftest import LogCapture
from tests.identity.flows import (
    bearer,
    confirm,
    dev_code,
    new_phone,
    refresh,
    request_code,
    wrong,
)

_PHONE = re.compile(r"\+\d{7,15}")
_JWT = re.compile(r"eyJ[\w-]+\.[\w-]+\.[\w-]+")
_IPV4 = re.compile(r"(?<![\d.])(\d{1,3}(?:\.\d{1,3}){3})(?![\d.]|/\d)")


def _searchable(line: str) -> str:
    """The line without its timestamp, whose microseconds could look like a code."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError:
        return line
    record.pop("timestamp", None)
    return json.dumps(record)


async def test_no_log_line_contains_a_phone_number_code_token_or_full_ip(
    http: httpx.AsyncClient, clock: FixedClock, captured_logs: LogCapture
) -> None:
    phone = new_phone()
    request_id = await request_code(http, phone)
    code = await dev_code(http, request_id)
    await confirm(http, request_id, wrong(code))
    await confirm(http, request_id, code, headers={"X-Anonymous-Id": "bad"})
    tokens = (await confirm(http, request_id, code)).json()
    rotated = (await refresh(http, tokens["refreshToken"])).json()
    await http.get("/api/identity/sessions", headers=bearer(rotated))
    clock.advance(timedelta(minutes=1))
    await refresh(http, tokens["refreshToken"])  # reuse: the family is revoked
    await http.post("/api/identity/sign-in/requests", json={"phoneNumber": "0" + phone[1:]})
    await http.post("/api/identity/sessions/logout", headers=bearer(rotated))

    secrets = {
        phone[3:],  # the national digits, however the number were formatted
        code,
        tokens["accessToken"],
        tokens["refreshToken"],
        rotated["accessToken"],
        rotated["refreshToken"],
    }
    lines = [_searchable(line) for line in captured_logs.lines()]
    assert any(request_id in line for line in lines)  # the flow was logged at all
    # The development phone (these tests run in dev with the log gateway): its line of the
    # sent code shows that code, on purpose, and nothing else secret.
    [phone_line] = [line for line in lines if f'"devCode": "{code}"' in line]
    assert request_id in phone_line
    for line in lines:
        shown = secrets - {code} if line is phone_line else secrets
        assert not any(secret in line for secret in shown), line
        assert not _PHONE.search(line), line
        assert not _JWT.search(line), line
        for match in _IPV4.finditer(line):
            address = ipaddress.ip_address(match.group(1))
            assert address.is_loopback or address.is_unspecified, line
        record = json.loads(line) if line.startswith("{") else {}
        if record.get("clientIp") is not None:
            assert str(record["clientIp"]).endswith(("/24", "/48")), line

"""The client's IP address: from the connection or a trusted proxy; never shown or published."""

from __future__ import annotations

import json

import httpx
import pytest

from pin_sessions.platform.ids import new_id
from pin_sessions.platform.runtime import Runtime
from tests.conftest import LogCapture
from tests.user_activity.conftest import UserFactory, device, outbox, sessions_of

START = "/api/user-activity/sessions/start"
LINK = "/api/user-activity/sessions/link"
CLIENT = "198.51.100.23"


@pytest.fixture
def settings_env(settings_env: dict[str, str]) -> dict[str, str]:
    # The test client connects from loopback: make loopback a trusted proxy.
    return settings_env | {"PIN_TRUSTED_PROXIES": "127.0.0.1/32"}


async def test_forwarded_for_from_a_trusted_proxy_is_the_stored_address(
    http: httpx.AsyncClient, runtime: Runtime
) -> None:
    anonymous_id = new_id()
    headers = device(anonymous_id) | {"X-Forwarded-For": f"203.0.113.9, {CLIENT}"}
    response = await http.post(START, headers=headers)
    [row] = await sessions_of(runtime, anonymous_id)
    assert row["device_ip"] == CLIENT
    assert CLIENT not in response.text


async def test_the_address_is_masked_in_logs_and_absent_from_events(
    http: httpx.AsyncClient, runtime: Runtime, new_user: UserFactory, captured_logs: LogCapture
) -> None:
    anonymous_id = new_id()
    headers = device(anonymous_id) | {"X-Forwarded-For": CLIENT}
    await http.post(START, headers=headers)
    # A switch writes every event kind that carries a session: linked and ended.
    await http.post(LINK, headers=headers | (await new_user()).headers)
    await http.post(LINK, headers=headers | (await new_user()).headers)
    events = await outbox(runtime)
    assert {event["event_type"] for event in events} == {
        "pin.user-activity.session-linked",
        "pin.user-activity.session-ended",
    }
    written = json.dumps([[event["payload"], event["headers"]] for event in events])
    assert CLIENT not in written
    assert "iPhone" not in written
    started = [line for line in captured_logs.lines() if '"session started"' in line]
    assert started
    assert all(CLIENT not in line for line in captured_logs.lines())
    assert any('"clientIp": "198.51.100.0/24"' in line for line in started)

"""Identity stores the client's address as user-activity does: via trusted proxies only."""

from __future__ import annotations

import uuid

import httpx
import pytest

from pin_sessions.platform.runtime import Runtime
from tests.identity.flows import confirm, dev_code, new_phone, refresh, session_row

CLIENT = "198.51.100.23"
FORGED = "203.0.113.9"


@pytest.fixture
def settings_env(settings_env: dict[str, str]) -> dict[str, str]:
    # The test client connects from loopback: make loopback a trusted proxy.
    return settings_env | {"PIN_TRUSTED_PROXIES": "127.0.0.1/32"}


async def test_a_trusted_proxys_forwarded_address_is_stored_on_every_identity_row(
    http: httpx.AsyncClient, runtime: Runtime
) -> None:
    forwarded = {"X-Forwarded-For": f"{FORGED}, {CLIENT}"}
    response = await http.post(
        "/api/identity/sign-in/requests", json={"phoneNumber": new_phone()}, headers=forwarded
    )
    request_id = response.json()["requestId"]
    tokens = (await confirm(http, request_id, await dev_code(http, request_id), forwarded)).json()
    successor = (await refresh(http, tokens["refreshToken"], {"X-Forwarded-For": FORGED})).json()
    async with runtime.database.connection() as conn:
        sicr_ip = await conn.fetchval(
            "select ip_address from identity.sign_in_confirmation_requests where id = $1",
            uuid.UUID(request_id),
        )
        signed_in = await session_row(conn, tokens["sessionId"])
        refreshed = await session_row(conn, successor["sessionId"])
    assert (sicr_ip, signed_in["device_ip"]) == (CLIENT, CLIENT)
    assert refreshed["device_ip"] == FORGED  # the refresh came through the proxy from there

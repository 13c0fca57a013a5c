"""A refused token is logged with its reason and the request id; the client's answer is as
before, naming no reason (a guesser learns nothing from it, an operator everything from the
log)."""

from __future__ import annotations

import json
import uuid
from dataclasses import replace
from datetime import timedelta
from typing import Any

import httpx
import jwt

from pin_sessions.identity import repository
from pin_sessions.identity.clients import ServiceClients
from pin_sessions.identity.keys import KeyCipher
from pin_sessions.platform.permissions import USER_ACTIVITY_INTERNAL
from pin_sessions.platform.runtime import Runtime
from pin_sessions.settings import DEFAULT_PUBLIC_URL
from tests.conftest import LogCapture
from tests.support.tokens import Tokens

SESSIONS = "/api/identity/sessions"
INTERNAL_LINK = f"/internal/sessions/{uuid.uuid4()}/link"
ELSEWHERE = "http://127.0.0.1:8100"


def _refusal(logs: LogCapture, response: httpx.Response) -> dict[str, Any]:
    """The one ``token refused`` line of the request that got ``response``."""
    request_id = response.headers["x-request-id"]
    lines = [json.loads(line) for line in logs.lines() if line.startswith("{")]
    found = [
        line
        for line in lines
        if line.get("event") == "token refused" and line.get("requestId") == request_id
    ]
    assert len(found) == 1, found
    line: dict[str, Any] = found[0]
    assert line["level"] == "info"
    return line


async def _refused(
    http: httpx.AsyncClient, logs: LogCapture, path: str, token: str, code: str
) -> dict[str, Any]:
    response = await http.get(path, headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 401, response.text
    assert response.json()["code"] == code
    assert "reason" not in response.json()
    return _refusal(logs, response)


async def test_each_refused_token_is_logged_with_its_reason_and_request_id(
    http: httpx.AsyncClient, runtime: Runtime, captured_logs: LogCapture
) -> None:
    tokens, now = Tokens.of(runtime), runtime.clock.now()
    user, session = uuid.uuid4(), uuid.uuid4()
    invalid = "AUTH_INVALID_TOKEN"

    forged = await tokens.forged_access(user, session, now=now)
    assert (await _refused(http, captured_logs, SESSIONS, forged, invalid))["reason"] == "signature"

    stale = await tokens.access(user, session, now=now - timedelta(hours=1))
    assert (await _refused(http, captured_logs, SESSIONS, stale, invalid))["reason"] == "expired"

    # A token signed for another public URL: the line names both issuers.
    elsewhere = Tokens.of(
        replace(runtime, settings=runtime.settings.model_copy(update={"public_url": ELSEWHERE}))
    )
    issued_elsewhere = await elsewhere.access(user, session, now=now)
    line = await _refused(http, captured_logs, SESSIONS, issued_elsewhere, invalid)
    assert (line["reason"], line["tokenIssuer"], line["issuer"]) == (
        "issuer",
        ELSEWHERE,
        DEFAULT_PUBLIC_URL,
    )

    real = jwt.decode(
        await tokens.access(user, session, now=now), options={"verify_signature": False}
    )
    header = jwt.get_unverified_header(forged)
    key = await _current_key(runtime)
    other_audience = jwt.encode({**real, "aud": "another-api"}, key, "ES256", headers=header)
    line = await _refused(http, captured_logs, SESSIONS, other_audience, invalid)
    assert line["reason"] == "audience"

    unknown_key = jwt.encode(real, key, "ES256", headers={**header, "kid": "A" * 43})
    line = await _refused(http, captured_logs, SESSIONS, unknown_key, invalid)
    assert line["reason"] == "unknown_key"

    # Well signed, but its refresh session is none of identity's live ones.
    unknown_session = await tokens.access(user, session, now=now)
    line = await _refused(http, captured_logs, SESSIONS, unknown_session, "AUTH_SESSION_NOT_ACTIVE")
    assert line["reason"] == "session_not_active"


async def test_a_disabled_clients_token_is_logged_with_its_client(
    http: httpx.AsyncClient, runtime: Runtime, captured_logs: LogCapture
) -> None:
    clients, now = ServiceClients(runtime.database), runtime.clock.now()
    client, _ = await clients.create("crm", [USER_ACTIVITY_INTERNAL], now)
    token = await Tokens.of(runtime).m2m(str(client.client_id), [USER_ACTIVITY_INTERNAL], now=now)
    # Disabled before the API first reads its copy of the disabled clients, at this request.
    await clients.disable(client.client_id, now)
    line = await _refused(http, captured_logs, INTERNAL_LINK, token, "AUTH_CLIENT_DISABLED")
    assert (line["reason"], line["clientId"]) == ("client_disabled", str(client.client_id))


async def _current_key(runtime: Runtime) -> Any:
    async with runtime.database.connection() as conn:
        row = await repository.current_signing_key(conn)
    assert row is not None
    return KeyCipher(runtime.secrets).open(row["kid"], row["private_key"])

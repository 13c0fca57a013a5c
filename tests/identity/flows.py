"""Client-side steps of identity's flows, over real HTTP."""

from __future__ import annotations

import secrets
import uuid
from typing import Any

import httpx

from pin_sessions.platform.database import Connection

IPHONE_UA = (
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_0 like Mac OS X) AppleWebKit/605.1.15 "
    "(KHTML, like Gecko) Version/17.0 Mobile/15E148 Safari/604.1"
)
DESKTOP_UA = (
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 "
    "(KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36"
)


def new_phone() -> str:
    return "+4479" + str(secrets.randbelow(10**8)).zfill(8)


def bearer(tokens: dict[str, Any]) -> dict[str, str]:
    return {"Authorization": f"Bearer {tokens['accessToken']}"}


async def request_code(http: httpx.AsyncClient, phone: str) -> str:
    response = await http.post("/api/identity/sign-in/requests", json={"phoneNumber": phone})
    assert response.status_code == 201, response.text
    request_id: str = response.json()["requestId"]
    return request_id


async def dev_code(http: httpx.AsyncClient, request_id: str) -> str:
    response = await http.get(f"/dev/sign-in-codes/{request_id}")
    assert response.status_code == 200, response.text
    code: str = response.json()["code"]
    return code


def wrong(code: str) -> str:
    return str((int(code) + 1) % 10**6).zfill(6)


async def confirm(
    http: httpx.AsyncClient, request_id: str, code: str, headers: dict[str, str] | None = None
) -> httpx.Response:
    return await http.post(
        "/api/identity/sign-in/confirm",
        json={"requestId": request_id, "code": code},
        headers=headers,
    )


async def sign_in(
    http: httpx.AsyncClient, phone: str | None = None, *, user_agent: str = IPHONE_UA
) -> dict[str, Any]:
    """Request a code, read it from the dev endpoint, confirm it: the token pair."""
    request_id = await request_code(http, phone or new_phone())
    code = await dev_code(http, request_id)
    response = await confirm(http, request_id, code, headers={"User-Agent": user_agent})
    assert response.status_code == 200, response.text
    tokens: dict[str, Any] = response.json()
    return tokens


async def refresh(
    http: httpx.AsyncClient, refresh_token: str, headers: dict[str, str] | None = None
) -> httpx.Response:
    return await http.post(
        "/api/identity/sessions/refresh", json={"refreshToken": refresh_token}, headers=headers
    )


def problem_code(response: httpx.Response) -> str:
    assert response.headers["content-type"].startswith("application/problem+json"), response.text
    code: str = response.json()["code"]
    return code


async def outbox_events(conn: Connection, topic: str) -> list[dict[str, Any]]:
    rows = await conn.fetch(
        "select event_type, version, aggregate_type, aggregate_id, payload "
        "from messaging.outbox where topic = $1 order by position",
        topic,
    )
    return [dict(row) for row in rows]


async def session_row(conn: Connection, session_id: str) -> dict[str, Any]:
    row = await conn.fetchrow(
        "select * from identity.refresh_sessions where id = $1", uuid.UUID(session_id)
    )
    assert row is not None
    return dict(row)

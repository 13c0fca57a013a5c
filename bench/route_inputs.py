"""What bench/routes.py prepares before its runs: users' tokens, sign-in codes, an OAuth client.

Made through the API as a client makes them (a code requested, read from the development
endpoint, confirmed), each sign-in with its own phone number; the inputs go to files, one
a line, that ``bench/routes.lua`` reads.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx

# Sign-ins at once while preparing: enough to overlap the round trips, few enough to
# leave the API's pool to them.
CONCURRENCY = 16


def access_tokens(url: str, count: int, path: Path) -> Path:
    """``count`` users' access tokens, one a line."""
    pairs = asyncio.run(_gathered(url, count, _sign_in, 0))
    return _lines(path, [pair["accessToken"] for pair in pairs])


def refresh_tokens(url: str, count: int, path: Path) -> Path:
    """``count`` users' refresh tokens, one a line."""
    pairs = asyncio.run(_gathered(url, count, _sign_in, 10_000))
    return _lines(path, [pair["refreshToken"] for pair in pairs])


def confirm_bodies(url: str, count: int, path: Path) -> Path:
    """``count`` confirm bodies (``{"requestId":…,"code":…}``) of fresh codes, one a line."""
    bodies = asyncio.run(_gathered(url, count, _sign_in_code, 100_000))
    return _lines(path, [json.dumps(body, separators=(",", ":")) for body in bodies])


def basic_credentials(env: dict[str, str]) -> str:
    """A new client's HTTP Basic credentials (``pin-sessions clients create``)."""
    created = subprocess.run(
        [sys.executable, "-m", "pin_sessions", "clients", "create", "--name", "bench",
         "--scope", "user-activity.internal"],
        env={**os.environ, **env}, capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    client = json.loads(created.stdout)
    return base64.b64encode(f"{client['clientId']}:{client['clientSecret']}".encode()).decode()


async def _sign_in_code(http: httpx.AsyncClient, phone: str) -> dict[str, str]:
    """A sign-in code requested for ``phone`` and read back: a confirm body's fields."""
    asked = await http.post("/api/identity/sign-in/requests", json={"phoneNumber": phone})
    asked.raise_for_status()
    request_id = asked.json()["requestId"]
    shown = await http.get(f"/dev/sign-in-codes/{request_id}")
    shown.raise_for_status()
    return {"requestId": request_id, "code": shown.json()["code"]}


async def _sign_in(http: httpx.AsyncClient, phone: str) -> dict[str, Any]:
    body = await _sign_in_code(http, phone)
    confirmed = await http.post("/api/identity/sign-in/confirm", json=body)
    confirmed.raise_for_status()
    pair: dict[str, Any] = confirmed.json()
    return pair


async def _gathered(url: str, count: int, make: Any, first_phone: int) -> list[Any]:
    """``count`` calls of ``make(http, phone)``, CONCURRENCY at a time, each its own phone."""
    results: list[Any] = []
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        for start in range(0, count, CONCURRENCY):
            batch = range(start, min(start + CONCURRENCY, count))
            phones = [f"+4479{first_phone + i:08d}" for i in batch]
            results += await asyncio.gather(*(make(http, phone) for phone in phones))
    return results


def _lines(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path

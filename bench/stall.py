"""Database stall benchmark: how long each route holds its answer while PostgreSQL is frozen.

    python bench/stall.py [--freeze 30] [--interval 0.5] [--statement-timeout SECONDS]

Serves the API as production does (``pin-sessions serve``) with the default settings
(``--statement-timeout`` sets ``PIN_DATABASE__STATEMENT_TIMEOUT`` when given), on an
embedded PostgreSQL of its own. Signs a user in (development codes), starts a device,
registers a service client and takes its m2m token; asks every route once so the
process's caches are warm; then freezes PostgreSQL — SIGSTOP to the postmaster and every
backend, as a host that stops answering would — for ``--freeze`` seconds. Throughout the
freeze each route is asked every ``--interval`` seconds, each request on its own
connection and never waiting for the previous one. After the thaw it waits for every
answer, then for each route to answer 200 again.

Per route it reports how many requests were sent, the longest and median time to an
answer, and the answers by status; ``boundSeconds`` is SPEC §11's bound, the statement
timeout + 1 s. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import psutil
from serving import free_port, running_server

from pin_sessions.platform.embedded import EmbeddedPostgres
from pin_sessions.platform.migrations import migrate

SECRET = "s" * 48
DEFAULT_STATEMENT_TIMEOUT = 5.0
RECOVERY_SECONDS = 60


@dataclass
class Route:
    name: str
    method: str
    path: str
    headers: dict[str, str] = field(default_factory=dict)
    form: dict[str, str] | None = None
    times: list[float] = field(default_factory=list)
    statuses: Counter[int] = field(default_factory=Counter)


@contextlib.contextmanager
def _own_database() -> Iterator[tuple[str, EmbeddedPostgres]]:
    """Always an embedded server: it is the one this bench freezes."""
    with tempfile.TemporaryDirectory(prefix="pin-bench-pg-") as workdir:
        embedded = EmbeddedPostgres(Path(workdir) / "pg", delete_on_stop=True)
        try:
            yield embedded.start(), embedded
        finally:
            embedded.stop()


def _postgres_processes(embedded: EmbeddedPostgres) -> list[psutil.Process]:
    postmaster = psutil.Process(int((embedded.pgdata / "postmaster.pid").read_text().split()[0]))
    return [postmaster, *postmaster.children(recursive=True)]


async def _migrate(dsn: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await migrate(conn)
    finally:
        await conn.close()


def _client(env: dict[str, str]) -> dict[str, str]:
    created = subprocess.run(
        [sys.executable, "-m", "pin_sessions", "clients", "create", "--name", "stall-bench",
         "--scope", "user-activity.internal"],
        env={**os.environ, **env}, capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    client: dict[str, str] = json.loads(created.stdout)
    return client


async def _routes(http: httpx.AsyncClient, client: dict[str, str]) -> list[Route]:
    """Every kind of route, with what it needs: a user's token, a device, a service's token."""
    phone = "+447900" + str(int(time.time()) % 1_000_000).zfill(6)
    requested = await http.post("/api/identity/sign-in/requests", json={"phoneNumber": phone})
    request_id = requested.raise_for_status().json()["requestId"]
    code = (await http.get(f"/dev/sign-in-codes/{request_id}")).raise_for_status().json()["code"]
    confirmed = await http.post(
        "/api/identity/sign-in/confirm", json={"requestId": request_id, "code": code}
    )
    access = confirmed.raise_for_status().json()["accessToken"]
    device = (await http.post("/api/user-activity/sessions/start")).raise_for_status().json()
    anonymous_id = device["anonymousId"]
    basic = base64.b64encode(f"{client['clientId']}:{client['clientSecret']}".encode()).decode()
    client_auth = {"Authorization": f"Basic {basic}"}
    grant = {"grant_type": "client_credentials"}
    m2m = (await http.post("/oauth/token", data=grant, headers=client_auth)).raise_for_status()
    user = {"Authorization": f"Bearer {access}"}
    service = {"Authorization": f"Bearer {m2m.json()['access_token']}"}
    heartbeat = "/api/user-activity/sessions/heartbeat"
    return [
        Route("heartbeat", "POST", heartbeat, {"X-Anonymous-Id": anonymous_id}),
        Route("heartbeatWithBearer", "POST", heartbeat, {"X-Anonymous-Id": anonymous_id, **user}),
        Route("identitySessions", "GET", "/api/identity/sessions", user),
        Route("jwks", "GET", "/.well-known/jwks.json"),
        Route("oauthToken", "POST", "/oauth/token", client_auth, grant),
        Route("oauthIntrospect", "POST", "/oauth/introspect", client_auth, {"token": access}),
        Route("internalDeviceLink", "GET", f"/internal/sessions/{anonymous_id}/link", service),
        Route("history", "GET", "/api/user-activity/sessions", {"X-Anonymous-Id": anonymous_id}),
        Route("start", "POST", "/api/user-activity/sessions/start"),
        Route("readyz", "GET", "/readyz"),
    ]


async def _ask(http: httpx.AsyncClient, route: Route, record: bool = True) -> int:
    started = time.monotonic()
    try:
        response = await http.request(
            route.method, route.path, headers=route.headers, data=route.form
        )
        status = response.status_code
    except httpx.HTTPError:
        status = 0  # no answer at all
    if record:
        route.times.append(time.monotonic() - started)
        route.statuses[status] += 1
    return status


async def _measure(url: str, routes: list[Route], frozen: list[psutil.Process], args: Any) -> float:
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=url, timeout=300, limits=limits) as http:
        for route in routes:  # warm: the key set, the client status, the pool
            assert await _ask(http, route, record=False) == 200, route.name
        for process in frozen:
            os.kill(process.pid, signal.SIGSTOP)
        pending: list[asyncio.Task[int]] = []
        try:
            thaw_at = time.monotonic() + args.freeze
            while time.monotonic() < thaw_at:
                pending += [asyncio.create_task(_ask(http, route)) for route in routes]
                await asyncio.sleep(args.interval)
        finally:
            for process in frozen:
                os.kill(process.pid, signal.SIGCONT)
        thawed = time.monotonic()
        await asyncio.gather(*pending)
        for route in routes:
            deadline = time.monotonic() + RECOVERY_SECONDS
            while await _ask(http, route, record=False) != 200:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{route.name} did not recover")
                await asyncio.sleep(0.2)
        return time.monotonic() - thawed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--freeze", type=float, default=30.0)
    parser.add_argument("--interval", type=float, default=0.5)
    parser.add_argument("--statement-timeout", type=float, default=None)
    args = parser.parse_args()
    statement_timeout = args.statement_timeout or DEFAULT_STATEMENT_TIMEOUT
    with _own_database() as (dsn, embedded), tempfile.TemporaryDirectory() as data_dir:
        asyncio.run(_migrate(dsn))
        env = {
            "PIN_DATABASE_URL": dsn,
            "PIN_DATA_DIR": data_dir,
            "PIN_SECRET_KEY": SECRET,
            "PIN_DEV_CODES": "1",
            "PIN_LOG_LEVEL": "warning",
        }
        if args.statement_timeout is not None:
            env["PIN_DATABASE__STATEMENT_TIMEOUT"] = str(args.statement_timeout)
        client = _client(env)
        port = free_port()
        command = [sys.executable, "-m", "pin_sessions", "serve", "--port", str(port)]
        with running_server(command, env):
            url = f"http://127.0.0.1:{port}"

            async def run() -> tuple[float, list[Route]]:
                async with httpx.AsyncClient(base_url=url, timeout=30) as http:
                    routes = await _routes(http, client)
                frozen = _postgres_processes(embedded)
                return await _measure(url, routes, frozen, args), routes

            recovery, routes = asyncio.run(run())
    report = {
        "freezeSeconds": args.freeze,
        "intervalSeconds": args.interval,
        "statementTimeoutSeconds": statement_timeout,
        "boundSeconds": statement_timeout + 1,
        "recoveredSecondsAfterThaw": round(recovery, 2),
        "routes": {
            route.name: {
                "requests": len(route.times),
                "maxSeconds": round(max(route.times), 2),
                "medianSeconds": round(statistics.median(route.times), 2),
                "statuses": {
                    str(status): count for status, count in sorted(route.statuses.items())
                },
            }
            for route in routes
        },
    }
    print(json.dumps(report))


if __name__ == "__main__":
    main()

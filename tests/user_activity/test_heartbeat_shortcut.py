"""HeartbeatShortcut: the heartbeat's common case answered beneath the framework.

A stand-in route records what the shortcut passes on, so each test sees which of the
two answered.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from datetime import timedelta

import httpx
import pytest
from fastapi import APIRouter, FastAPI, Request, Response
from prometheus_client import CollectorRegistry
from starlette.middleware import Middleware

from pin_sessions.bootstrap import build_api, build_runtime
from pin_sessions.platform.clock import FixedClock
from pin_sessions.platform.database import Database
from pin_sessions.platform.http.app import create_http_app
from pin_sessions.platform.ids import new_id
from pin_sessions.platform.runtime import Runtime
from pin_sessions.settings import Settings
from pin_sessions.user_activity import operations
from pin_sessions.user_activity.domain import device_info
from pin_sessions.user_activity.heartbeat_shortcut import HeartbeatShortcut
from pin_sessions.user_activity.http import HEARTBEAT_PATH
from tests.support.http import LiveServer
from tests.user_activity.conftest import device, sessions_of

PASSED_ON = 299


def _stand_in_routes(passed_on: list[str]) -> APIRouter:
    router = APIRouter()

    @router.api_route(HEARTBEAT_PATH, methods=["POST", "GET"])
    async def heartbeat(request: Request) -> Response:
        passed_on.append(request.method)
        return Response(status_code=PASSED_ON)

    return router


def _app(runtime: Runtime, database: Database, passed_on: list[str]) -> FastAPI:
    shortcut = Middleware(HeartbeatShortcut, database=database, clock=runtime.clock)
    return create_http_app(runtime, routers=[_stand_in_routes(passed_on)], shortcuts=[shortcut])


@pytest.fixture
def passed_on() -> list[str]:
    return []


@pytest.fixture
def shortcut_url(
    settings: Settings,
    database_url: str,
    clock: FixedClock,
    registry: CollectorRegistry,
    passed_on: list[str],
) -> Iterator[str]:
    served = build_runtime(settings, database_url, clock=clock, registry=registry)
    with LiveServer(_app(served, served.database, passed_on)) as url:
        yield url


@pytest.fixture
async def client(shortcut_url: str) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=shortcut_url, timeout=30) as client:
        yield client


async def _chunked(body: bytes) -> AsyncIterator[bytes]:
    """A body without Content-Length: httpx sends it with Transfer-Encoding: chunked."""
    yield body


async def _active_device(runtime: Runtime) -> uuid.UUID:
    anonymous_id = new_id()
    await operations.start_session(
        runtime.database, anonymous_id, None, device_info(None, None), runtime.clock.now()
    )
    return anonymous_id


async def test_a_plain_heartbeat_of_an_active_session_is_answered_by_the_shortcut(
    client: httpx.AsyncClient, runtime: Runtime, clock: FixedClock, passed_on: list[str]
) -> None:
    anonymous_id = await _active_device(runtime)
    clock.advance(timedelta(seconds=40))
    response = await client.post(HEARTBEAT_PATH, headers=device(anonymous_id))
    assert passed_on == []
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.headers["x-request-id"]
    [row] = await sessions_of(runtime, anonymous_id)
    assert response.json() == {
        "sessionId": str(row["id"]),
        "lastActivityAt": "2026-11-29T12:00:40Z",
        "restarted": False,
    }
    assert row["last_activity_at"] == clock.now()


@pytest.mark.parametrize(
    ("method", "headers", "content"),
    [
        pytest.param("POST", {}, None, id="no device"),
        pytest.param("POST", {"X-Anonymous-Id": "not-a-uuid"}, None, id="malformed device"),
        pytest.param("POST", None, b"{}", id="a body to validate"),
        pytest.param("POST", None, "chunked", id="a chunked body"),
        pytest.param("GET", None, None, id="another method"),
    ],
)
async def test_anything_but_a_plain_heartbeat_is_passed_on_untouched(
    client: httpx.AsyncClient,
    runtime: Runtime,
    clock: FixedClock,
    passed_on: list[str],
    method: str,
    headers: dict[str, str] | None,
    content: bytes | str | None,
) -> None:
    anonymous_id = await _active_device(runtime)
    clock.advance(timedelta(seconds=40))
    response = await client.request(
        method,
        HEARTBEAT_PATH,
        headers=device(anonymous_id) if headers is None else headers,
        content=_chunked(b"{}") if content == "chunked" else content,
    )
    assert response.status_code == PASSED_ON
    assert passed_on == [method]
    [row] = await sessions_of(runtime, anonymous_id)
    assert row["last_activity_at"] == clock.now() - timedelta(seconds=40)


async def test_a_device_without_an_active_session_is_passed_on_to_start_one(
    client: httpx.AsyncClient, runtime: Runtime, passed_on: list[str]
) -> None:
    anonymous_id = new_id()
    response = await client.post(HEARTBEAT_PATH, headers=device(anonymous_id))
    assert response.status_code == PASSED_ON
    assert passed_on == ["POST"]
    assert await sessions_of(runtime, anonymous_id) == []


def test_a_database_failure_is_a_problem_not_a_crash(
    settings: Settings, database_url: str, clock: FixedClock, registry: CollectorRegistry
) -> None:
    served = build_runtime(settings, database_url, clock=clock, registry=registry)
    # Nothing listens on port 9; with no minimum size the pool opens without connecting.
    dead = Database("postgresql://postgres@127.0.0.1:9/nowhere", min_size=0)

    @asynccontextmanager
    async def open_dead_pool(_app: object) -> AsyncIterator[None]:
        await dead.open()
        yield
        await dead.close()

    passed_on: list[str] = []
    app = _app(served, dead, passed_on)
    app.router.lifespan_context = open_dead_pool
    with LiveServer(app) as url:
        response = httpx.post(f"{url}{HEARTBEAT_PATH}", headers=device(new_id()))
    assert response.status_code == 503
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["code"] == "SERVICE_UNAVAILABLE"
    assert response.json()["requestId"] == response.headers["x-request-id"]
    assert passed_on == []


async def test_the_shortcut_and_the_route_give_the_same_answer(
    http: httpx.AsyncClient, clock: FixedClock
) -> None:
    """The real API: a plain heartbeat takes the shortcut, one with a body takes the route."""
    started = await http.post("/api/user-activity/sessions/start")
    headers = {"X-Anonymous-Id": started.json()["anonymousId"]}
    clock.advance(timedelta(seconds=40))
    shortcut = await http.post(HEARTBEAT_PATH, headers=headers)
    route = await http.post(HEARTBEAT_PATH, headers=headers, json={})
    assert shortcut.status_code == route.status_code == 200
    assert shortcut.headers["content-type"] == route.headers["content-type"]
    assert shortcut.content == route.content


def test_the_api_serves_heartbeats_through_the_shortcut(
    settings: Settings, database_url: str, clock: FixedClock
) -> None:
    api = build_api(build_runtime(settings, database_url, clock=clock))
    installed: list[object] = [middleware.cls for middleware in api.user_middleware]
    assert HeartbeatShortcut in installed

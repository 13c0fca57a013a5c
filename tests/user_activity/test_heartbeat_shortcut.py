"""HeartbeatShortcut: the heartbeat's common case answered beneath the framework.

A stand-in route records what the shortcut passes on, so each test sees which of the
two answered.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from datetime import timedelta

import httpx
import pytest
from fastapi import APIRouter, FastAPI, Request, Response
from prometheus_client import CollectorRegistry
from starlette.middleware import Middleware

from pin_sessions.bootstrap import build_api, build_authenticator, build_runtime
from pin_sessions.platform.auth import TokenCodec
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
from tests.conftest import LogCapture
from tests.support.http import LiveServer
from tests.user_activity.conftest import UserFactory, device, sessions_of

PASSED_ON = 299


def _stand_in_routes(passed_on: list[str]) -> APIRouter:
    router = APIRouter()

    @router.api_route(HEARTBEAT_PATH, methods=["POST", "GET"])
    async def heartbeat(request: Request) -> Response:
        passed_on.append(request.method)
        return Response(status_code=PASSED_ON)

    return router


def _app(runtime: Runtime, database: Database, passed_on: list[str]) -> FastAPI:
    shortcut = Middleware(
        HeartbeatShortcut,
        database=database,
        clock=runtime.clock,
        authenticator=build_authenticator(runtime),
    )
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
        pytest.param("POST", {"X-Anonymous-Id": str(uuid.UUID(int=0))}, None, id="nil device"),
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


def test_a_database_failure_is_a_problem_counted_and_logged_under_the_heartbeat_route(
    settings: Settings,
    database_url: str,
    clock: FixedClock,
    registry: CollectorRegistry,
    captured_logs: LogCapture,
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
    labels = {"method": "POST", "route": HEARTBEAT_PATH, "status": "503"}
    assert registry.get_sample_value("pin_http_requests_total", labels) == 1
    [line] = [
        json.loads(line)
        for line in captured_logs.lines()
        if response.headers["x-request-id"] in line and '"http request"' in line
    ]
    assert line["route"] == HEARTBEAT_PATH


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


def _bad_authorization(kind: str, codec: TokenCodec, clock: FixedClock) -> str:
    """An Authorization header the token check refuses without asking the database."""
    user_id, session_id = new_id(), new_id()
    if kind == "expired":
        token, _ = codec.issue_access_token(
            user_id, session_id, now=clock.now() - timedelta(hours=1)
        )
    elif kind == "forged":
        forger = TokenCodec(b"not-the-server-secret-but-long-enough-for-hs256")
        token, _ = forger.issue_access_token(user_id, session_id, now=clock.now())
    elif kind == "service":
        token = codec.issue_m2m_token("crm", ["user-activity.internal"], now=clock.now())
    elif kind == "not bearer":
        return "Basic dXNlcjpwYXNz"
    else:
        token = "garbage"
    return f"Bearer {token}"


@pytest.mark.parametrize("state", ["active session", "no session"])
@pytest.mark.parametrize("kind", ["garbage", "expired", "forged", "service", "not bearer"])
async def test_a_bad_bearer_token_gets_the_same_401_from_the_shortcut_and_the_route(
    http: httpx.AsyncClient,
    runtime: Runtime,
    codec: TokenCodec,
    clock: FixedClock,
    state: str,
    kind: str,
) -> None:
    """Whether a session is Active never decides if a bad token passes."""
    anonymous_id = await _active_device(runtime) if state == "active session" else new_id()
    before = await sessions_of(runtime, anonymous_id)
    clock.advance(timedelta(seconds=40))
    headers = {**device(anonymous_id), "Authorization": _bad_authorization(kind, codec, clock)}
    shortcut = await http.post(HEARTBEAT_PATH, headers=headers)
    route = await http.post(HEARTBEAT_PATH, headers=headers, json={})
    assert shortcut.status_code == route.status_code == 401
    assert shortcut.json()["code"] == route.json()["code"]
    assert shortcut.headers["www-authenticate"] == route.headers["www-authenticate"] == "Bearer"
    assert await sessions_of(runtime, anonymous_id) == before
    metrics = (await http.get("/metrics")).text
    assert f'route="{HEARTBEAT_PATH}",status="401"}} 2.0' in metrics


@pytest.mark.parametrize(("state", "status"), [("active session", 200), ("no session", 401)])
async def test_a_token_of_an_ended_session_gets_the_same_answer_from_the_shortcut_and_the_route(
    http: httpx.AsyncClient,
    runtime: Runtime,
    new_user: UserFactory,
    clock: FixedClock,
    state: str,
    status: int,
) -> None:
    """Extending a session asks nothing of the database but the UPDATE; starting one for a
    user asks whether the token's session is still live."""
    user = await new_user()
    async with runtime.database.connection() as conn:
        await conn.execute(
            "update identity.refresh_sessions set status = 'Revoked' where id = $1",
            user.session_id,
        )
    clock.advance(timedelta(seconds=40))
    answers = []
    # No body takes the shortcut (when a session is Active), an empty object the route.
    bodies: list[dict[str, str] | None] = [None, {}]
    for body in bodies:
        anonymous_id = await _active_device(runtime) if state == "active session" else new_id()
        headers = device(anonymous_id, user)
        answers.append(await http.post(HEARTBEAT_PATH, headers=headers, json=body))
    assert [answer.status_code for answer in answers] == [status, status]
    if status == 401:
        assert {answer.json()["code"] for answer in answers} == {"AUTH_SESSION_NOT_ACTIVE"}

"""The heartbeat: one handler, one UPDATE, served ahead of the framework and as the route.

Every device heartbeats once a minute. The route is registered once, and the app also
dispatches it ahead of the framework (``platform.http.fast_path``) to the same function;
a heartbeat's session is extended by one group-committed UPDATE, never a second one,
whatever follows (a body, a token, a restart).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta

import httpx
import pytest
from prometheus_client import CollectorRegistry

from pin_sessions.bootstrap.api import build_api
from pin_sessions.bootstrap.database import build_runtime
from pin_sessions.platform.clock import FixedClock
from pin_sessions.platform.database import Database
from pin_sessions.platform.ids import new_id
from pin_sessions.platform.runtime import Runtime
from pin_sessions.settings import Settings
from pin_sessions.user_activity import sessions
from pin_sessions.user_activity.domain import device_info
from pin_sessions.user_activity.http import HEARTBEAT_PATH
from pin_sessions.user_activity.repository.loaded import QUERIES
from tests.conftest import LogCapture
from tests.support.http import in_process
from tests.support.tokens import Tokens
from tests.user_activity.conftest import UserFactory, device, sessions_of

# Statement-level triggers fire for every UPDATE statement, even one that matched no row:
# the log shows how often each statement ran against the sessions table.
LOG_UPDATE_STATEMENTS = """
create table public.session_updates (query text not null);
create function public.log_session_update() returns trigger language plpgsql as $$
begin
    insert into public.session_updates values (current_query());
    return null;
end $$;
create trigger log_session_updates after update on user_activity.sessions
for each statement execute function public.log_session_update();
"""


@pytest.fixture
async def heartbeat_updates(runtime: Runtime) -> None:
    async with runtime.database.connection() as conn:
        await conn.execute(LOG_UPDATE_STATEMENTS)


async def _heartbeat_statements(runtime: Runtime) -> int:
    async with runtime.database.connection() as conn:
        count: int = await conn.fetchval(
            "select count(*) from public.session_updates where query = $1",
            QUERIES.heartbeat_batch.text,
        )
    return count


async def _active_device(runtime: Runtime) -> uuid.UUID:
    anonymous_id = new_id()
    await sessions.start_session(
        runtime.database, anonymous_id, None, device_info(None, None), runtime.clock.now()
    )
    return anonymous_id


async def _closed_device(runtime: Runtime) -> uuid.UUID:
    anonymous_id = await _active_device(runtime)
    async with runtime.database.connection() as conn:
        await conn.execute(
            "update user_activity.sessions set status = 'Inactive', ended_at = last_activity_at,"
            " duration = interval '0' where anonymous_id = $1",
            anonymous_id,
        )
    return anonymous_id


@pytest.mark.usefixtures("heartbeat_updates")
@pytest.mark.parametrize("state", ["active session", "no session", "closed session"])
@pytest.mark.parametrize("body", [None, {}], ids=["no body", "empty body"])
@pytest.mark.parametrize("signed_in", [False, True], ids=["guest", "user"])
async def test_every_heartbeat_runs_the_conditional_update_exactly_once(
    http: httpx.AsyncClient,
    runtime: Runtime,
    new_user: UserFactory,
    clock: FixedClock,
    state: str,
    body: dict[str, str] | None,
    signed_in: bool,
) -> None:
    user = await new_user() if signed_in else None
    if state == "active session":
        anonymous_id = await _active_device(runtime)
    elif state == "closed session":
        anonymous_id = await _closed_device(runtime)
    else:
        anonymous_id = new_id()
    clock.advance(timedelta(seconds=40))
    before = await _heartbeat_statements(runtime)

    response = await http.post(HEARTBEAT_PATH, headers=device(anonymous_id, user), json=body)

    assert response.status_code == 200, response.text
    assert response.json()["restarted"] is (state != "active session")
    assert await _heartbeat_statements(runtime) - before == 1
    active = [row for row in await sessions_of(runtime, anonymous_id) if row["status"] == "Active"]
    assert [row["last_activity_at"] for row in active] == [clock.now()]


def test_the_heartbeat_is_one_route_that_the_app_also_serves_ahead_of_the_framework(
    settings: Settings, database_url: str, clock: FixedClock
) -> None:
    api = build_api(build_runtime(settings, database_url, clock=clock))
    assert api.fast_path is not None
    routes = api.fast_path.routes
    assert [(route.path, route.methods) for route in routes] == [(HEARTBEAT_PATH, {"POST"})]
    document = api.openapi()
    assert list(document["paths"][HEARTBEAT_PATH]) == ["post"]


async def test_ahead_of_the_framework_and_through_it_the_answer_is_the_same(
    settings: Settings, database_url: str, clock: FixedClock, runtime: Runtime
) -> None:
    """The same request to the API as served, and to the same API without the fast path."""
    anonymous_id = await _active_device(runtime)
    clock.advance(timedelta(seconds=40))
    served = build_api(build_runtime(settings, database_url, clock=clock))
    plain = build_api(build_runtime(settings, database_url, clock=clock))
    plain.fast_path = None
    answers = []
    for app in (served, plain):
        async with in_process(app) as client:
            answers.append(await client.post(HEARTBEAT_PATH, headers=device(anonymous_id)))
    assert answers[0].status_code == answers[1].status_code == 200
    assert answers[0].headers["content-type"] == answers[1].headers["content-type"]
    assert answers[0].content == answers[1].content


async def test_a_database_failure_is_a_problem_counted_and_logged_under_the_heartbeat_route(
    settings: Settings, clock: FixedClock, registry: CollectorRegistry, captured_logs: LogCapture
) -> None:
    # Nothing listens on port 9; with no minimum size the pool opens without connecting.
    dead = "postgresql://postgres@127.0.0.1:9/nowhere"
    runtime = build_runtime(
        settings, dead, clock=clock, registry=registry, database=Database(dead, min_size=0)
    )
    async with in_process(build_api(runtime)) as client:
        response = await client.post(HEARTBEAT_PATH, headers=device(new_id()))

    assert response.status_code == 503
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["code"] == "SERVICE_UNAVAILABLE"
    assert response.json()["requestId"] == response.headers["x-request-id"]
    labels = {"method": "POST", "route": HEARTBEAT_PATH, "status": "503"}
    assert registry.get_sample_value("pin_http_requests_total", labels) == 1
    [line] = [
        json.loads(line)
        for line in captured_logs.lines()
        if response.headers["x-request-id"] in line and '"http request"' in line
    ]
    assert line["route"] == HEARTBEAT_PATH


@pytest.mark.parametrize("sent", ["declared", "streamed"])
async def test_a_body_over_the_limit_is_a_413_and_extends_nothing(
    api_url: str, runtime: Runtime, clock: FixedClock, sent: str
) -> None:
    """Served ahead of the framework, the heartbeat reads its body in step with the app
    (no task watches for the client leaving), bounded all the same, whether the length is
    declared or the body streamed."""
    anonymous_id = await _active_device(runtime)
    before = await sessions_of(runtime, anonymous_id)
    clock.advance(timedelta(seconds=40))
    oversized = b"{" + b" " * (runtime.settings.http.max_body_bytes + 1) + b"}"

    async def streamed() -> AsyncIterator[bytes]:
        for start in range(0, len(oversized), 4096):
            yield oversized[start : start + 4096]

    content = oversized if sent == "declared" else streamed()
    async with httpx.AsyncClient(base_url=api_url, timeout=30) as client:
        response = await client.post(
            HEARTBEAT_PATH,
            headers={**device(anonymous_id), "Content-Type": "application/json"},
            content=content,
        )
        unchanged = await sessions_of(runtime, anonymous_id)
        # The next heartbeat is served as ever.
        again = await client.post(HEARTBEAT_PATH, headers=device(anonymous_id))

    assert response.status_code == 413
    assert response.json()["code"] == "PAYLOAD_TOO_LARGE"
    assert ("transfer-encoding" in response.request.headers) is (sent == "streamed")
    assert unchanged == before
    assert again.status_code == 200
    assert again.json()["lastActivityAt"] == clock.now().isoformat().replace("+00:00", "Z")


async def _bad_authorization(kind: str, tokens: Tokens, clock: FixedClock) -> str:
    """An Authorization header the token check refuses by the token alone."""
    user_id, session_id = new_id(), new_id()
    if kind == "expired":
        token = await tokens.access(user_id, session_id, now=clock.now() - timedelta(hours=1))
    elif kind == "forged":
        token = await tokens.forged_access(user_id, session_id, now=clock.now())
    elif kind == "service":
        token = await tokens.m2m("crm", ["user-activity.internal"], now=clock.now())
    elif kind == "not bearer":
        return "Basic dXNlcjpwYXNz"
    else:
        token = "garbage"
    return f"Bearer {token}"


@pytest.mark.parametrize("state", ["active session", "no session"])
@pytest.mark.parametrize("kind", ["garbage", "expired", "forged", "service", "not bearer"])
async def test_a_bad_bearer_token_is_the_same_401_in_every_state_with_or_without_a_body(
    http: httpx.AsyncClient,
    runtime: Runtime,
    tokens: Tokens,
    clock: FixedClock,
    state: str,
    kind: str,
) -> None:
    """Whether a session is Active never decides if a bad token passes."""
    anonymous_id = await _active_device(runtime) if state == "active session" else new_id()
    before = await sessions_of(runtime, anonymous_id)
    clock.advance(timedelta(seconds=40))
    headers = {
        **device(anonymous_id),
        "Authorization": await _bad_authorization(kind, tokens, clock),
    }
    bodiless = await http.post(HEARTBEAT_PATH, headers=headers)
    with_body = await http.post(HEARTBEAT_PATH, headers=headers, json={})
    assert bodiless.status_code == with_body.status_code == 401
    assert bodiless.json()["code"] == with_body.json()["code"]
    assert bodiless.headers["www-authenticate"] == with_body.headers["www-authenticate"]
    assert bodiless.headers["www-authenticate"] == "Bearer"
    assert await sessions_of(runtime, anonymous_id) == before
    metrics = (await http.get("/metrics")).text
    assert f'route="{HEARTBEAT_PATH}",status="401"}} 2.0' in metrics


@pytest.mark.parametrize(("state", "status"), [("active session", 200), ("no session", 401)])
async def test_a_token_of_an_ended_session_extends_a_session_but_never_starts_one(
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
    bodies: list[dict[str, str] | None] = [None, {}]
    for body in bodies:
        anonymous_id = await _active_device(runtime) if state == "active session" else new_id()
        answers.append(
            await http.post(HEARTBEAT_PATH, headers=device(anonymous_id, user), json=body)
        )
    assert [answer.status_code for answer in answers] == [status, status]
    if status == 401:
        assert {answer.json()["code"] for answer in answers} == {"AUTH_SESSION_NOT_ACTIVE"}


@pytest.mark.usefixtures("heartbeat_updates")
async def test_parallel_heartbeats_share_updates_and_each_gets_its_own_session(
    http: httpx.AsyncClient, runtime: Runtime, clock: FixedClock, registry: CollectorRegistry
) -> None:
    devices = [await _active_device(runtime) for _ in range(40)]
    clock.advance(timedelta(seconds=40))
    before = await _heartbeat_statements(runtime)

    answers = await asyncio.gather(
        *(http.post(HEARTBEAT_PATH, headers=device(anonymous_id)) for anonymous_id in devices)
    )

    statements = await _heartbeat_statements(runtime) - before
    assert {answer.status_code for answer in answers} == {200}
    assert 1 <= statements < len(devices), "heartbeats in flight together go in one UPDATE"
    for anonymous_id, answer in zip(devices, answers, strict=True):
        [row] = await sessions_of(runtime, anonymous_id)
        assert answer.json() == {
            "sessionId": str(row["id"]),
            "lastActivityAt": "2026-11-29T12:00:40Z",
            "restarted": False,
        }
    count = registry.get_sample_value("user_activity_heartbeat_batch_size_count")
    total = registry.get_sample_value("user_activity_heartbeat_batch_size_sum")
    assert (count, total) == (statements, len(devices))


async def test_heartbeats_of_one_device_in_one_batch_get_the_same_answer(
    http: httpx.AsyncClient, runtime: Runtime, clock: FixedClock
) -> None:
    anonymous_id = await _active_device(runtime)
    clock.advance(timedelta(seconds=40))

    answers = await asyncio.gather(
        *(http.post(HEARTBEAT_PATH, headers=device(anonymous_id)) for _ in range(10))
    )

    assert {answer.status_code for answer in answers} == {200}
    assert len({answer.content for answer in answers}) == 1
    [row] = await sessions_of(runtime, anonymous_id)
    assert row["last_activity_at"] == clock.now()

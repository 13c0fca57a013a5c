from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager

import httpx
import pytest
from fastapi import APIRouter
from prometheus_client import CollectorRegistry
from pydantic import BaseModel, ConfigDict

from pin_sessions.bootstrap.api import build_http_services
from pin_sessions.bootstrap.database import build_runtime
from pin_sessions.platform.clock import FixedClock
from pin_sessions.platform.errors import AppError
from pin_sessions.platform.http.app import create_http_app
from pin_sessions.platform.migrations import available_migrations
from pin_sessions.settings import Settings
from tests.conftest import LogCapture
from tests.support.http import LiveServer
from tests.support.postgres import DatabaseFactory
from tests.support.waiting import wait_until

PROBLEM = "application/problem+json"


class Echo(BaseModel):
    model_config = ConfigDict(extra="forbid")
    phoneNumber: str


class Teapot(AppError):
    code = "TEST_TEAPOT"
    status = 418
    title = "I am a teapot"


class Busy(AppError):
    code = "TEST_BUSY"
    status = 429
    title = "Busy"


def _probe_router() -> APIRouter:
    router = APIRouter()

    @router.post("/probe/echo")
    async def echo(body: Echo) -> dict[str, str]:
        return {"ok": "yes"}

    @router.get("/probe/teapot")
    async def teapot() -> None:
        raise Teapot("short and stout")

    @router.get("/probe/crash")
    async def crash() -> None:
        raise RuntimeError("boom")

    @router.get("/probe/busy")
    async def busy() -> None:
        raise Busy(retry_after=42)

    # One path, two routes: as GET and DELETE of /api/identity/sessions are.
    @router.get("/probe/shared/{item}")
    async def read_item(item: str) -> dict[str, str]:
        return {"item": item}

    @router.delete("/probe/shared/{item}", status_code=204)
    async def delete_item(item: str) -> None:
        del item

    return router


@pytest.fixture
def shell_url(
    settings: Settings, database_url: str, clock: FixedClock, registry: CollectorRegistry
) -> Iterator[str]:
    runtime = build_runtime(settings, database_url, clock=clock, registry=registry)
    with LiveServer(
        create_http_app(runtime, build_http_services(runtime), [_probe_router()])
    ) as url:
        yield url


@pytest.fixture
async def client(shell_url: str) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=shell_url) as client:
        yield client


async def test_healthz_answers_ok(client: httpx.AsyncClient) -> None:
    response = await client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


async def test_readyz_is_200_on_a_migrated_database(client: httpx.AsyncClient) -> None:
    response = await client.get("/readyz")
    assert response.status_code == 200
    body = response.json()
    assert body == {"status": "ready", "database": {"host": body["database"]["host"]}}
    assert body["database"]["host"].endswith(".s.PGSQL.5432")  # the embedded server's socket


def test_readyz_is_503_while_migrations_are_pending(
    settings: Settings, databases: DatabaseFactory
) -> None:
    dsn = databases.create(migrated=False)
    runtime = build_runtime(settings, dsn)
    try:
        with LiveServer(create_http_app(runtime, build_http_services(runtime))) as url:
            response = httpx.get(f"{url}/readyz")
    finally:
        databases.drop(dsn)
    assert response.status_code == 503
    assert response.headers["content-type"] == PROBLEM
    assert response.json()["code"] == "SERVICE_UNAVAILABLE"
    assert response.json()["pendingMigrations"] == [m.version for m in available_migrations()]


def test_readyz_is_503_when_the_database_does_not_answer(settings: Settings) -> None:
    dead = "postgresql://postgres@127.0.0.1:9/nowhere"
    runtime = build_runtime(settings, dead)
    app = create_http_app(runtime, build_http_services(runtime))
    # The lifespan would fail to open a pool to a dead server, so serve without it.
    app.router.lifespan_context = _no_lifespan
    with LiveServer(app) as url:
        response = httpx.get(f"{url}/readyz")
    assert response.status_code == 503
    assert response.json()["code"] == "SERVICE_UNAVAILABLE"


@asynccontextmanager
async def _no_lifespan(_app: object) -> AsyncIterator[None]:
    yield


async def test_metrics_are_prometheus_text_and_count_requests(client: httpx.AsyncClient) -> None:
    await client.get("/healthz")
    response = await client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    assert (
        'pin_http_requests_total{method="GET",route="/healthz",status="200"} 1.0' in response.text
    )


async def test_openapi_and_docs_are_served(client: httpx.AsyncClient) -> None:
    spec = (await client.get("/openapi.json")).json()
    assert spec["openapi"].startswith("3.")
    assert "/readyz" in spec["paths"]
    docs = await client.get("/docs")
    assert docs.status_code == 200
    assert "swagger" in docs.text.lower()


async def test_unknown_route_is_problem_json(client: httpx.AsyncClient) -> None:
    response = await client.get("/no/such/route")
    assert response.status_code == 404
    assert response.headers["content-type"] == PROBLEM
    body = response.json()
    assert body["code"] == "NOT_FOUND"
    assert body["status"] == 404
    assert body["instance"] == "/no/such/route"
    assert body["type"].endswith("/problems/NOT_FOUND")


async def test_wrong_method_is_problem_json(client: httpx.AsyncClient) -> None:
    response = await client.delete("/healthz")
    assert response.status_code == 405
    assert response.json()["code"] == "METHOD_NOT_ALLOWED"
    assert response.headers["allow"] == "GET, HEAD"


@pytest.mark.parametrize("method", ["PUT", "POST", "PATCH"])
async def test_a_wrong_method_names_every_method_the_path_serves(
    client: httpx.AsyncClient, method: str
) -> None:
    """RFC 9110 §15.5.6: Allow lists the methods of every route at the path, not the first's."""
    response = await client.request(method, "/probe/shared/x")
    assert response.status_code == 405
    assert response.headers["content-type"] == PROBLEM
    assert response.headers["allow"] == "DELETE, GET, HEAD"


async def test_head_is_answered_wherever_get_is_with_its_headers_and_no_body(
    client: httpx.AsyncClient,
) -> None:
    for path in ("/healthz", "/probe/shared/x", "/openapi.json", "/probe/teapot"):
        get = await client.get(path)
        head = await client.head(path)
        assert head.status_code == get.status_code, path
        assert head.content == b""
        for header in ("content-type", "content-length"):
            assert head.headers[header] == get.headers[header], (path, header)


async def test_head_where_there_is_no_get_is_refused_like_any_other_method(
    client: httpx.AsyncClient,
) -> None:
    response = await client.head("/probe/echo")
    assert response.status_code == 405
    assert response.headers["allow"] == "POST"


async def test_head_requests_are_counted_as_head_under_their_route(
    client: httpx.AsyncClient,
) -> None:
    await client.head("/healthz")
    metrics = (await client.get("/metrics")).text
    assert 'pin_http_requests_total{method="HEAD",route="/healthz",status="200"} 1.0' in metrics


async def test_an_error_that_knows_when_to_ask_again_says_so_in_retry_after(
    client: httpx.AsyncClient,
) -> None:
    response = await client.get("/probe/busy")
    assert response.status_code == 429
    assert response.headers["retry-after"] == "42"
    assert response.json()["code"] == "TEST_BUSY"


async def test_validation_errors_are_422_and_never_echo_the_input(
    client: httpx.AsyncClient,
) -> None:
    response = await client.post("/probe/echo", json={"phoneNumber": "+79991234567", "extra": 1})
    assert response.status_code == 422
    assert response.headers["content-type"] == PROBLEM
    body = response.json()
    assert body["code"] == "VALIDATION_ERROR"
    assert body["errors"][0]["field"] == "extra"
    assert "+79991234567" not in response.text


async def test_malformed_json_is_400(client: httpx.AsyncClient) -> None:
    response = await client.post(
        "/probe/echo", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert response.status_code == 400
    assert response.json()["code"] == "MALFORMED_REQUEST"


async def test_declared_oversized_body_is_413(client: httpx.AsyncClient) -> None:
    response = await client.post("/probe/echo", json={"phoneNumber": "x" * 70_000})
    assert response.status_code == 413
    assert response.json()["code"] == "PAYLOAD_TOO_LARGE"


async def test_streamed_oversized_body_is_413(client: httpx.AsyncClient) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"phoneNumber": "'
        for _ in range(20):
            yield b"x" * 4096
        yield b'"}'

    response = await client.post(
        "/probe/echo", content=chunks(), headers={"content-type": "application/json"}
    )
    assert response.status_code == 413
    assert response.json()["code"] == "PAYLOAD_TOO_LARGE"


async def test_app_errors_carry_their_code_and_status(client: httpx.AsyncClient) -> None:
    response = await client.get("/probe/teapot")
    assert response.status_code == 418
    assert response.json()["code"] == "TEST_TEAPOT"
    assert response.json()["detail"] == "short and stout"


async def test_an_unexpected_failure_is_a_problem_not_a_stack_trace(
    client: httpx.AsyncClient,
) -> None:
    response = await client.get("/probe/crash")
    assert response.status_code == 500
    assert response.json()["code"] == "INTERNAL_ERROR"
    assert "boom" not in response.text


async def test_every_request_gets_an_id_that_appears_in_its_log_line(
    client: httpx.AsyncClient, captured_logs: LogCapture
) -> None:
    response = await client.get("/no/such/route")
    request_id = response.headers["x-request-id"]
    assert response.json()["requestId"] == request_id

    def logged() -> bool:
        lines = [json.loads(line) for line in captured_logs.lines()]
        return any(
            line.get("requestId") == request_id
            and line["event"] == "http request"
            and line["status"] == 404
            for line in lines
        )

    # The server thread writes the line just after it sent the response.
    await wait_until(logged, timeout=10)


async def test_a_sane_client_request_id_is_kept(client: httpx.AsyncClient) -> None:
    response = await client.get("/healthz", headers={"x-request-id": "trace-abc.123"})
    assert response.headers["x-request-id"] == "trace-abc.123"


async def test_an_unsafe_client_request_id_is_replaced(client: httpx.AsyncClient) -> None:
    response = await client.get("/healthz", headers={"x-request-id": "bad id\twith spaces"})
    assert response.headers["x-request-id"] != "bad id\twith spaces"

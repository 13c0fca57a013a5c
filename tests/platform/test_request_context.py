"""The outermost layer: an error no handler knew is answered once, logged once, and the
connection lives on."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from fastapi import APIRouter
from prometheus_client import CollectorRegistry

from pin_sessions.bootstrap.api import build_http_services
from pin_sessions.bootstrap.database import build_runtime
from pin_sessions.platform.clock import FixedClock
from pin_sessions.platform.http.app import create_http_app
from pin_sessions.settings import Settings
from tests.conftest import LogCapture
from tests.support.http import LiveServer
from tests.support.raw_http import RawConnection


def _crashing_router() -> APIRouter:
    router = APIRouter()

    @router.get("/probe/crash")
    async def crash() -> None:
        raise RuntimeError("boom +15550100")

    return router


@pytest.fixture
def shell_url(
    settings: Settings, database_url: str, clock: FixedClock, registry: CollectorRegistry
) -> Iterator[str]:
    runtime = build_runtime(settings, database_url, clock=clock, registry=registry)
    with LiveServer(
        create_http_app(runtime, build_http_services(runtime), [_crashing_router()])
    ) as url:
        yield url


async def test_an_unexpected_error_is_one_500_problem_one_error_line_and_no_dropped_connection(
    shell_url: str, captured_logs: LogCapture, registry: CollectorRegistry
) -> None:
    connection = await RawConnection.open(shell_url)
    try:
        crashed = await connection.request("GET", "/probe/crash")
        after = await connection.request("GET", "/healthz")
    finally:
        await connection.close()

    assert crashed.status == 500
    assert crashed.headers["content-type"] == "application/problem+json"
    assert crashed.json()["code"] == "INTERNAL_ERROR"
    assert "boom" not in crashed.body.decode()
    assert after.status == 200
    request_id = crashed.headers["x-request-id"]
    lines = [json.loads(line) for line in captured_logs.lines()]
    errors = [line for line in lines if line.get("level") == "error"]
    mine = [line for line in errors if line.get("requestId") == request_id]
    assert [line["event"] for line in mine] == ["unhandled error"]
    # The server never saw the exception: it would log "Exception in ASGI application".
    assert not [line for line in errors if "ASGI" in str(line.get("event"))]
    assert (
        registry.get_sample_value(
            "pin_http_requests_total", {"method": "GET", "route": "/probe/crash", "status": "500"}
        )
        == 1
    )

"""FastPath: an exact method and path dispatched ahead of the framework to the route's endpoint.

The route is registered once and stays the documented operation; the fast path calls its
endpoint directly, inside the app's own request layers, and renders an error through the
handler the app registered for it. Starlette's router marks a request it routed with
``scope["endpoint"]``, and Starlette's outermost error middleware is on the call stack of
any request it handles: the probe reports both, so each test sees which of the two served
the request.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import AsyncIterator

import httpx
import pytest
from fastapi import APIRouter, FastAPI, Request, Response
from fastapi.routing import APIRoute
from prometheus_client import CollectorRegistry
from starlette.middleware.errors import ServerErrorMiddleware

from pin_sessions.bootstrap.api import build_http_services
from pin_sessions.platform.errors import AppError
from pin_sessions.platform.http.app import create_http_app
from pin_sessions.platform.http.fast_path import FastPath
from pin_sessions.platform.runtime import Runtime
from tests.conftest import LogCapture

PROBE = "/probe/fast"


class Refused(AppError):
    code = "TEST_REFUSED"
    status = 409
    title = "Refused"


async def probe(request: Request) -> Response:
    if request.headers.get("x-refuse"):
        raise Refused("no")
    through = {
        "routedByFramework": "endpoint" in request.scope,
        "insideFrameworkLayers": any(
            isinstance(frame.frame.f_locals.get("self"), ServerErrorMiddleware)
            for frame in inspect.stack(context=0)
        ),
    }
    return Response(json.dumps(through), media_type="application/json")


def _router() -> tuple[APIRouter, APIRoute]:
    router = APIRouter()
    router.add_api_route(PROBE, probe, methods=["POST"])
    [route] = [r for r in router.routes if isinstance(r, APIRoute)]
    return router, route


def _app(runtime: Runtime, *, fast: bool) -> FastAPI:
    router, route = _router()
    return create_http_app(
        runtime, build_http_services(runtime), [router], fast_routes=[route] if fast else []
    )


@pytest.fixture
async def client(runtime: Runtime) -> AsyncIterator[httpx.AsyncClient]:
    app = _app(runtime, fast=True)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        yield client


async def test_the_exact_method_and_path_reach_the_endpoint_ahead_of_the_framework(
    client: httpx.AsyncClient,
) -> None:
    response = await client.post(PROBE)
    assert response.status_code == 200
    assert response.json() == {"routedByFramework": False, "insideFrameworkLayers": False}
    # Still inside the app's own request context.
    assert response.headers["x-request-id"]


async def test_without_the_fast_path_the_same_endpoint_is_routed_by_the_framework(
    runtime: Runtime,
) -> None:
    transport = httpx.ASGITransport(app=_app(runtime, fast=False))
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        response = await client.post(PROBE)
    assert response.json() == {"routedByFramework": True, "insideFrameworkLayers": True}


async def test_another_method_or_path_passes_on_to_the_framework(
    client: httpx.AsyncClient,
) -> None:
    wrong_method = await client.get(PROBE)
    assert wrong_method.status_code == 405
    assert wrong_method.headers["allow"] == "POST"
    # The framework's own routing, untouched: a trailing slash is redirected as ever.
    assert (await client.post(PROBE + "/")).status_code == 307


async def test_an_error_is_rendered_by_the_apps_own_handler_and_named_by_the_route(
    client: httpx.AsyncClient, registry: CollectorRegistry, captured_logs: LogCapture
) -> None:
    response = await client.post(PROBE, headers={"x-refuse": "1"})

    assert response.status_code == 409
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["code"] == "TEST_REFUSED"
    assert response.json()["requestId"] == response.headers["x-request-id"]
    labels = {"method": "POST", "route": PROBE, "status": "409"}
    assert registry.get_sample_value("pin_http_requests_total", labels) == 1
    [line] = [
        json.loads(line)
        for line in captured_logs.lines()
        if response.headers["x-request-id"] in line and '"http request"' in line
    ]
    assert line["route"] == PROBE


def test_an_endpoint_that_needs_more_than_the_request_is_refused() -> None:
    router = APIRouter()

    @router.post("/needs-a-body")
    async def needs_body(request: Request, count: int) -> int:
        return count

    [route] = [r for r in router.routes if isinstance(r, APIRoute)]

    with pytest.raises(ValueError, match="takes the request alone"):
        FastPath([route], layers=lambda endpoints: endpoints)

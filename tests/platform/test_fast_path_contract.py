"""What the fast path (``platform/http/fast_path.py``) takes from FastAPI and Starlette.

It pays for itself — a plain Starlette ``Route`` for the heartbeat costs 1.9 times its server CPU
per request (BENCHMARKS.md, "The heartbeat's fast path against a plain Route") — but it
leans on framework internals that no changelog promises. Each test here pins one of them
on a bare FastAPI app, so an upgrade that changes it fails here, by name, rather than
quietly in the heartbeat's metrics, logs or error answers.
"""

from __future__ import annotations

import fastapi
import httpx
from fastapi import APIRouter, Depends, FastAPI, Request, Response
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from starlette.types import Scope

from pin_sessions.platform.http import fast_path
from pin_sessions.platform.http.fast_path import FastPath, ServiceApp

PATH = "/contract"
seen: list[Scope] = []


class Base(Exception):
    pass


class Middle(Base):
    pass


class Leaf(Middle):
    pass


async def endpoint(request: Request) -> Response:
    seen.append(dict(request.scope))
    if request.headers.get("x-raise"):
        raise Leaf("raised")
    return Response("ok")


def _needs(value: int = Depends(lambda: 1)) -> Response:
    return Response(str(value))


def _route(router: APIRouter) -> APIRoute:
    [route] = [r for r in router.routes if isinstance(r, APIRoute)]
    return route


def _route_of(app: FastAPI) -> APIRoute:
    route: APIRoute = app.state.route
    return route


def _app(*, fast: bool) -> ServiceApp:
    app = ServiceApp()
    router = APIRouter()
    router.add_api_route(PATH, endpoint, methods=["POST"])
    app.include_router(router)

    async def middle(_request: Request, exc: Exception) -> Response:
        return JSONResponse({"handler": "middle", "detail": str(exc)}, status_code=409)

    async def base(_request: Request, exc: Exception) -> Response:
        return JSONResponse({"handler": "base"}, status_code=400)

    app.add_exception_handler(Base, base)
    app.add_exception_handler(Middle, middle)
    # The route as its router registered it, as the heartbeat's HEARTBEAT_ROUTE is.
    app.state.route = _route(router)
    if fast:
        app.fast_path = FastPath([_route(router)], layers=lambda inner: inner)
    return app


async def _post(app: FastAPI, **headers: str) -> httpx.Response:
    seen.clear()
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        return await client.post(PATH, headers=headers)


def test_an_api_route_exposes_its_endpoint_methods_path_and_solved_dependencies() -> None:
    """``FastPath`` indexes routes by ``methods`` and ``path``, calls ``endpoint``, and
    refuses one whose ``dependant`` lists dependencies."""
    router = APIRouter()
    router.add_api_route(PATH, endpoint, methods=["POST"])
    router.add_api_route("/needs", _needs, methods=["GET"])
    plain, needing = (r for r in router.routes if isinstance(r, APIRoute))
    assert (plain.path, plain.methods, plain.endpoint) == (PATH, {"POST"}, endpoint)
    assert plain.dependant.dependencies == []
    assert len(needing.dependant.dependencies) == 1


async def test_the_framework_puts_the_app_and_the_route_in_the_scope_as_the_fast_path_does() -> (
    None
):
    """Routed by the framework, ``scope["app"]`` is the app and ``scope["route"]`` the
    ``APIRoute`` (request context names the metric's route from it; the endpoint reads
    ``app.state`` through it): the fast path sets the very same two keys."""
    for fast in (False, True):
        app = _app(fast=fast)
        response = await _post(app)
        assert response.status_code == 200
        [scope] = seen
        assert scope["app"] is app
        assert scope["route"] is _route_of(app)
        assert scope["route"].path == PATH


async def test_the_framework_dispatches_an_error_to_the_handler_of_its_nearest_class() -> None:
    """Starlette picks the handler registered for the nearest class in the exception's MRO,
    from ``app.exception_handlers``: the fast path's lookup gives the same answer."""
    framework = await _post(_app(fast=False), **{"x-raise": "1"})
    fast = await _post(_app(fast=True), **{"x-raise": "1"})
    assert framework.status_code == fast.status_code == 409
    assert framework.json() == fast.json() == {"handler": "middle", "detail": "raised"}
    app = _app(fast=False)
    assert Middle in app.exception_handlers and Base in app.exception_handlers
    found = fast_path._handler_for(app, Leaf())
    assert found is app.exception_handlers[Middle]


async def test_fastapi_is_an_asgi_app_whose_call_the_service_app_can_wrap() -> None:
    """``ServiceApp`` overrides ``FastAPI.__call__(scope, receive, send)``; a request not
    on the fast path goes through ``super().__call__`` as if there were none."""
    assert ServiceApp.__call__ is not FastAPI.__call__
    assert list(fastapi.FastAPI.__call__.__code__.co_varnames[1:4]) == ["scope", "receive", "send"]
    seen.clear()
    transport = httpx.ASGITransport(app=_app(fast=True))
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        assert (await client.get(PATH)).status_code == 405  # the framework's own answer
    assert seen == []

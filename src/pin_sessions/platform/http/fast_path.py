"""Routes served ahead of the framework: an exact method and path, straight to the handler.

A hot route whose endpoint reads everything from the request itself — ``async def
handler(request: Request) -> Response`` — gains nothing from FastAPI's routing,
dependency solving and response handling, nor from the layers FastAPI and Starlette wrap
around every request (their telemetry, body limit and error middleware), yet pays for
them on every call: the heartbeat as a plain Starlette ``Route`` costs 1.9 times the
server CPU it costs here (BENCHMARKS.md). What this takes from FastAPI and Starlette is
pinned by ``tests/platform/test_fast_path_contract.py``. Such a route is still registered
once, as the documented route; :class:`ServiceApp` only dispatches its exact method and
path to that same endpoint, through this app's own request layers (request context, CORS)
and nothing else. The request is marked with the route (so metrics and logs name its
template), and an error is rendered through the very handler the app registered for it
(problem+json). Any other request goes through the framework untouched.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from fastapi import FastAPI
from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

# Every handler this app registers is a coroutine function (platform.http.problems).
ExceptionHandler = Callable[[Request, Exception], Awaitable[Response]]
# Wraps the endpoints in the app's own request layers, as its middleware wraps the router.
Layers = Callable[[ASGIApp], ASGIApp]


class FastPath:
    """The listed routes' endpoints, each called with the request alone, inside ``layers``."""

    def __init__(self, routes: Iterable[APIRoute], *, layers: Layers) -> None:
        self.routes = list(routes)
        self._routes: dict[tuple[str, str], APIRoute] = {}
        for route in self.routes:
            _check_plain(route)
            for method in route.methods or ():
                self._routes[(method, route.path)] = route
        self.app = layers(self._dispatch)

    def serves(self, scope: Scope) -> bool:
        return scope["type"] == "http" and (scope["method"], scope["path"]) in self._routes

    async def _dispatch(self, scope: Scope, receive: Receive, send: Send) -> None:
        route = self._routes[(scope["method"], scope["path"])]
        scope["route"] = route
        request = Request(scope, receive)
        try:
            response: Response = await route.endpoint(request)
        except Exception as exc:
            handler = _handler_for(scope["app"], exc)
            if handler is None:
                raise
            response = await handler(request, exc)
        await response(scope, receive, send)


class ServiceApp(FastAPI):
    """FastAPI, with the requests its ``fast_path`` serves answered ahead of the framework."""

    fast_path: FastPath | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        fast_path = self.fast_path
        if fast_path is not None and fast_path.serves(scope):
            # What Starlette would have set: the endpoint reads app.state through it.
            scope["app"] = self
            await fast_path.app(scope, receive, send)
            return
        await super().__call__(scope, receive, send)


def _check_plain(route: APIRoute) -> None:
    """Only an endpoint that takes the request alone can be called without FastAPI."""
    parameters = list(inspect.signature(route.endpoint).parameters.values())
    if len(parameters) != 1 or route.dependant.dependencies:
        raise ValueError(f"{route.path}: a fast route's endpoint takes the request alone")


def _handler_for(app: Any, exc: Exception) -> ExceptionHandler | None:
    """The exception handler the app registered for ``exc``'s class, as Starlette finds it."""
    handlers: dict[Any, Any] = app.exception_handlers
    for kind in type(exc).__mro__:
        if kind in handlers:
            found: ExceptionHandler = handlers[kind]
            return found
    return None

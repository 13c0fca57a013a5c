"""Routes served beneath the framework: an exact method and path, straight to the handler.

A hot route whose endpoint reads everything from the request itself — ``async def
handler(request: Request) -> Response`` — gains nothing from FastAPI's routing,
dependency solving and response handling, yet pays for them on every call. Listed here,
such a route is still registered once, as the documented route; this middleware only
dispatches its exact method and path to that same endpoint, marks the request with the
route (so metrics and logs name its template), and renders an error through the very
handler the app registered for it (problem+json). Any other request passes on untouched.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

# Every handler this app registers is a coroutine function (platform.http.problems).
ExceptionHandler = Callable[[Request, Exception], Awaitable[Response]]


class FastPath:
    """ASGI middleware: dispatch the listed routes' exact method and path to their endpoints."""

    def __init__(self, app: ASGIApp, *, routes: Iterable[APIRoute]) -> None:
        self.app = app
        self._routes: dict[tuple[str, str], APIRoute] = {}
        for route in routes:
            _check_plain(route)
            for method in route.methods or ():
                self._routes[(method, route.path)] = route

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        route = (
            self._routes.get((scope["method"], scope["path"])) if scope["type"] == "http" else None
        )
        if route is None:
            await self.app(scope, receive, send)
            return
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

"""RFC 9457 problem+json for every error the API returns, each with a stable ``code``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import structlog
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import JSONResponse
from starlette.routing import Match

from pin_sessions.platform.errors import (
    AppError,
    MalformedRequest,
    MethodNotAllowed,
    NotFound,
    PayloadTooLarge,
    ValidationFailed,
)
from pin_sessions.platform.http.problem_types import problem_type_url
from pin_sessions.platform.http.validation import field_errors
from pin_sessions.platform.http.wiring import public_url_of

log = structlog.get_logger(__name__)

PROBLEM_CONTENT_TYPE = "application/problem+json"
# HEAD is served wherever GET is (``head.py``); OPTIONS and TRACE by no route.
_ROUTABLE_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")


def problem_response(
    request: Request,
    error: type[AppError] | AppError,
    *,
    status: int | None = None,
    detail: str | None = None,
    extra: dict[str, Any] | None = None,
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    """Render ``error`` (a class or an instance) as problem+json for ``request``.

    Every 401 says how to authenticate (``WWW-Authenticate``); an error that knows when
    asking again is worth it says so (``Retry-After``).
    """
    status = status or error.status
    body: dict[str, Any] = {
        "type": problem_type_url(_public_url(request), error.code),
        "title": error.title,
        "status": status,
        "detail": detail or (error.detail if isinstance(error, AppError) else error.title),
        "instance": request.url.path,
        "code": error.code,
    }
    request_id = request.scope.get("state", {}).get("request_id")
    if request_id:
        body["requestId"] = request_id
    if isinstance(error, AppError):
        body.update(error.extra)
    body.update(extra or {})
    response_headers = dict(headers or {})
    if status == 401:
        response_headers["WWW-Authenticate"] = "Bearer"
    if isinstance(error, AppError) and error.retry_after is not None:
        response_headers["Retry-After"] = str(error.retry_after)
    return JSONResponse(
        body, status_code=status, media_type=PROBLEM_CONTENT_TYPE, headers=response_headers
    )


def _public_url(request: Request) -> str:
    """The service's public URL, which problem types live under; the request's own base
    where no app has said it (an answer given before routing)."""
    return public_url_of(request.scope.get("app")) or str(request.base_url)


def app_error_response(request: Request, exc: AppError) -> JSONResponse:
    """The answer to one of our errors, logged when it is the service's fault."""
    if exc.status >= 500:
        log.error("request failed", errorCode=exc.code, error=str(exc))
    return problem_response(request, exc)


async def _app_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, AppError)
    return app_error_response(request, exc)


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    found = exc.errors()
    if any(error.get("type") == "json_invalid" for error in found):
        return problem_response(request, MalformedRequest, detail="request body is not valid JSON")
    errors = field_errors(found)
    detail = "; ".join(f"{error['field']} {error['message']}" for error in errors)
    return problem_response(request, ValidationFailed, detail=detail, extra={"errors": errors})


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    if isinstance(exc.__cause__, PayloadTooLarge):
        return problem_response(request, exc.__cause__)
    headers = dict(exc.headers or {})
    if exc.status_code == 405:
        headers["Allow"] = ", ".join(allowed_methods(request))
    known = {404: NotFound, 405: MethodNotAllowed, 400: MalformedRequest}.get(exc.status_code)
    if known is not None:
        return problem_response(request, known, detail=str(exc.detail), headers=headers)
    return problem_response(
        request, AppError, status=exc.status_code, detail=str(exc.detail), headers=headers
    )


def allowed_methods(request: Request) -> list[str]:
    """Every method some route serves at this request's path, HEAD wherever GET is.

    Starlette's 405 names the methods of the first route whose path matched only, while
    one path may be served by several routes (GET and DELETE of ``/api/identity/sessions``).
    So each method is put to the router's routes, as it would be routed.
    """
    routes = request.app.router.routes

    def served(method: str) -> bool:
        probe = {**request.scope, "method": method}
        return any(route.matches(probe)[0] is Match.FULL for route in routes)

    methods = [method for method in _ROUTABLE_METHODS if served(method)]
    return sorted([*methods, "HEAD"] if "GET" in methods else methods)


def install_problem_handlers(app: FastAPI) -> None:
    """Our errors, validation and routing failures; anything else ends in the request context."""
    app.add_exception_handler(AppError, _app_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)

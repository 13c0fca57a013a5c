"""Per-request context: request id, one log line, metrics, the body limit, and the last word.

A pure ASGI middleware (no ``BaseHTTPMiddleware``) so the heartbeat path pays for
nothing it does not use. It is the outermost layer of ours, so it is also where an
exception no handler knew ends: logged once and answered with a 500 problem, instead
of escaping to the server, which would log it a second time and drop the keep-alive
connection. A request whose client went away is cancelled (see ``receiving``) and
recorded with status 499, nginx's "client closed request". It is also where a request is
admitted to the process's bounded work once it has arrived whole, or answered 503 at once
(``admission``).
"""

from __future__ import annotations

import asyncio
import random
import re
import time
from collections.abc import Iterable

import structlog
from starlette.requests import ClientDisconnect, Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from pin_sessions.platform.errors import AppError
from pin_sessions.platform.http.admission import UNBOUNDED_PATHS, Admission, Overloaded
from pin_sessions.platform.http.headers import DuplicateHeader
from pin_sessions.platform.http.problems import problem_response
from pin_sessions.platform.http.receiving import RequestReader
from pin_sessions.platform.logging import mask_ip
from pin_sessions.platform.metrics import HttpMetrics

log = structlog.get_logger("pin_sessions.http")

REQUEST_ID_HEADER = b"x-request-id"
_CLIENT_REQUEST_ID = re.compile(rb"^[A-Za-z0-9._:-]{1,128}$")
QUIET_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})
CLIENT_CLOSED_REQUEST = 499


# The route label of a request turned away before it was routed (``admission``).
SHED_ROUTE = "shed"


class RequestContextMiddleware:
    def __init__(
        self,
        app: ASGIApp,
        *,
        metrics: HttpMetrics,
        max_body_bytes: int,
        quiet_paths: Iterable[str] = (),
        read_ahead: bool = True,
        admission: Admission | None = None,
    ) -> None:
        self.app = app
        self.admission = admission
        self.read_ahead = read_ahead
        self.metrics = metrics
        self.max_body_bytes = max_body_bytes
        self.quiet_paths = QUIET_PATHS | frozenset(quiet_paths)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = _request_id(scope)
        scope.setdefault("state", {})["request_id"] = request_id
        structlog.contextvars.bind_contextvars(requestId=request_id)
        started = time.perf_counter()
        status = 500
        reader = RequestReader(
            scope, receive, max_body_bytes=self.max_body_bytes, read_ahead=self.read_ahead
        )

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                reader.responding()
                status = message["status"]
                message.setdefault("headers", [])
                message["headers"] = [*message["headers"], (REQUEST_ID_HEADER, request_id.encode())]
            await send(message)

        reader.start()
        admitted = False
        label = None
        try:
            if _repeats_content_type(scope["headers"]):
                # Which body a second Content-Type describes is anybody's guess: the
                # framework would read the first; a proxy may have joined them.
                refused = problem_response(
                    Request(scope),
                    DuplicateHeader(
                        "Content-Type must be given at most once", header="Content-Type"
                    ),
                )
                await refused(scope, reader.receive, send_with_id)
                return
            if self.admission is not None and scope["path"] not in UNBOUNDED_PATHS:
                await reader.arrived()
                # A client gone before its request was in takes no place: the app routes
                # it, is cancelled where it asks for the body, and it counts as 499.
                if not reader.disconnected:
                    admitted = self.admission.enter()
                    if not admitted:
                        label = SHED_ROUTE
                        shed = problem_response(Request(scope), Overloaded())
                        await shed(scope, reader.receive, send_with_id)
                        return
            reader.begin()
            await self.app(scope, reader.receive, send_with_id)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if not (reader.cancelled_the_request and task is not None and task.uncancel() == 0):
                raise
            # Nobody is waiting for the answer: its work, a query included, is abandoned.
            status = CLIENT_CLOSED_REQUEST
        except ClientDisconnect:
            # The body stopped short, read in step (the connection closed: by the client,
            # or by the server's read timeout): nobody to answer, and no error of ours.
            status = CLIENT_CLOSED_REQUEST
        except Exception as exc:
            log.exception("unhandled error", errorType=type(exc).__name__)
            if not reader.response_started:
                response = problem_response(Request(scope), AppError)
                await response(scope, reader.receive, send_with_id)
        finally:
            if admitted:
                assert self.admission is not None
                self.admission.leave()
            reader.stop()
            self._record(scope, status, time.perf_counter() - started, label)
            structlog.contextvars.unbind_contextvars("requestId")

    def _record(self, scope: Scope, status: int, elapsed: float, label: str | None) -> None:
        template = label or getattr(scope.get("route"), "path", None) or "unmatched"
        method = scope["method"]
        self.metrics.count(method, template, status, elapsed)
        if scope["path"] in self.quiet_paths and status < 400:
            return
        client = scope.get("client")
        log.info(
            "http request",
            method=method,
            route=template,
            status=status,
            durationMs=round(elapsed * 1000, 2),
            clientIp=mask_ip(client[0]) if client else None,
        )


def _repeats_content_type(headers: list[tuple[bytes, bytes]]) -> bool:
    # ASGI servers give header names lower-cased.
    seen = False
    for name, _ in headers:
        if name == b"content-type":
            if seen:
                return True
            seen = True
    return False


def _request_id(scope: Scope) -> str:
    for name, value in scope["headers"]:
        if name == REQUEST_ID_HEADER and _CLIENT_REQUEST_ID.match(value):
            return bytes(value).decode()
    # A correlation id, not a secret: unique is enough, and this needs no system call.
    return f"{random.getrandbits(128):032x}"

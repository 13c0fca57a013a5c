"""Per-request context: request id, one log line, metrics, and the body size limit.

A pure ASGI middleware (no ``BaseHTTPMiddleware``) so the heartbeat path pays for
nothing it does not use.
"""

from __future__ import annotations

import re
import secrets
import time
from collections.abc import Iterable

import structlog
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from pin_sessions.platform.errors import PayloadTooLarge
from pin_sessions.platform.logging import mask_ip
from pin_sessions.platform.metrics import HttpMetrics

log = structlog.get_logger("pin_sessions.http")

REQUEST_ID_HEADER = b"x-request-id"
_CLIENT_REQUEST_ID = re.compile(rb"^[A-Za-z0-9._:-]{1,128}$")
_QUIET_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})


class RequestContextMiddleware:
    def __init__(
        self,
        app: ASGIApp,
        *,
        metrics: HttpMetrics,
        max_body_bytes: int,
        quiet_paths: Iterable[str] = (),
    ) -> None:
        self.app = app
        self.metrics = metrics
        self.max_body_bytes = max_body_bytes
        self.quiet_paths = _QUIET_PATHS | frozenset(quiet_paths)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = _request_id(scope)
        scope.setdefault("state", {})["request_id"] = request_id
        structlog.contextvars.bind_contextvars(requestId=request_id)
        started = time.perf_counter()
        status = 500

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message.setdefault("headers", [])
                message["headers"] = [*message["headers"], (REQUEST_ID_HEADER, request_id.encode())]
            await send(message)

        try:
            await self.app(scope, self._limited(scope, receive), send_with_id)
        finally:
            self._record(scope, status, time.perf_counter() - started)
            structlog.contextvars.unbind_contextvars("requestId")

    def _limited(self, scope: Scope, receive: Receive) -> Receive:
        """Refuse bodies over the limit, declared (Content-Length) or streamed (chunked)."""
        limit = self.max_body_bytes
        for name, value in scope["headers"]:
            if name == b"content-length" and value.isdigit() and int(value) > limit:

                async def refuse() -> Message:
                    raise PayloadTooLarge(f"request body exceeds {limit} bytes")

                return refuse
        seen = 0

        async def counting() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise PayloadTooLarge(f"request body exceeds {limit} bytes")
            return message

        return counting

    def _record(self, scope: Scope, status: int, elapsed: float) -> None:
        route = scope.get("route")
        template = getattr(route, "path", None) or "unmatched"
        method = scope["method"]
        self.metrics.requests.labels(method, template, str(status)).inc()
        self.metrics.duration.labels(method, template).observe(elapsed)
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


def _request_id(scope: Scope) -> str:
    for name, value in scope["headers"]:
        if name == REQUEST_ID_HEADER and _CLIENT_REQUEST_ID.match(value):
            return bytes(value).decode()
    return secrets.token_hex(16)

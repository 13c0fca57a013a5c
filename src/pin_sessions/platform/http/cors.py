"""CORS for browsers on other origins, scoped by path exactly as SPEC §8 says.

Only ``/api/**`` and ``/.well-known/**`` answer other origins, and only those listed in
``PIN_HTTP__CORS_ORIGINS``; ``/internal/**``, ``/dev/**`` and ``/oauth/**`` never do, so a
page elsewhere can neither call them nor read their answers. Starlette's ``CORSMiddleware``
applies to every path of the app, hence this small one.

A preflight from an allowed origin to a scoped path is answered here (204, cached 10
minutes) without reaching a route; any other preflight goes on to the app, which has no
OPTIONS route, and gets its 405 without CORS headers, which the browser reads as a refusal.
Credentials (cookies) are never allowed: the API authenticates by headers, and
``Authorization`` is one of the allowed ones.
"""

from __future__ import annotations

from collections.abc import Iterable

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from pin_sessions.platform.http.anonymous_id import ANONYMOUS_ID_HEADER
from pin_sessions.platform.http.idempotency_key import IDEMPOTENCY_KEY_HEADER
from pin_sessions.platform.http.middleware import REQUEST_ID_HEADER

CORS_PATH_PREFIXES = ("/api/", "/.well-known/")
ALLOWED_METHODS = ("GET", "POST", "DELETE")
ALLOWED_HEADERS = ("Authorization", "Content-Type", ANONYMOUS_ID_HEADER, IDEMPOTENCY_KEY_HEADER)
# Read by scripts: when to retry, and the id to quote in a bug report.
EXPOSED_HEADERS = ("Retry-After", REQUEST_ID_HEADER.decode())
PREFLIGHT_MAX_AGE_SECONDS = 600


def in_cors_scope(path: str) -> bool:
    """Whether other origins may call ``path`` at all."""
    return path.startswith(CORS_PATH_PREFIXES)


class CorsMiddleware:
    """Answers preflights and labels answers for the allowed origins, on scoped paths."""

    def __init__(self, app: ASGIApp, *, origins: Iterable[str]) -> None:
        self.app = app
        self.origins = frozenset(origins)
        self._preflight_headers = [
            (b"access-control-allow-methods", ", ".join(ALLOWED_METHODS).encode()),
            (b"access-control-allow-headers", ", ".join(ALLOWED_HEADERS).encode()),
            (b"access-control-max-age", str(PREFLIGHT_MAX_AGE_SECONDS).encode()),
        ]
        self._exposed = (b"access-control-expose-headers", ", ".join(EXPOSED_HEADERS).encode())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not in_cors_scope(scope["path"]):
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        origin = headers.get("origin", "")
        allowed = origin in self.origins
        if allowed and _is_preflight(scope, headers):
            await self._preflight(origin, send)
            return

        async def labelled(message: Message) -> None:
            if message["type"] == "http.response.start":
                # The answer depends on Origin: a shared cache must not serve one origin's
                # answer to another.
                extra = [(b"vary", b"Origin")]
                if allowed:
                    extra += [(b"access-control-allow-origin", origin.encode()), self._exposed]
                message["headers"] = [*message.get("headers", []), *extra]
            await send(message)

        await self.app(scope, receive, labelled)

    async def _preflight(self, origin: str, send: Send) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": 204,
                "headers": [
                    (b"access-control-allow-origin", origin.encode()),
                    (b"vary", b"Origin"),
                    *self._preflight_headers,
                ],
            }
        )
        await send({"type": "http.response.body", "body": b""})


def _is_preflight(scope: Scope, headers: Headers) -> bool:
    return scope["method"] == "OPTIONS" and "access-control-request-method" in headers

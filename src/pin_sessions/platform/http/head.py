"""HEAD wherever GET is served (RFC 9110 §9.3.2): the GET's status and headers, no body.

FastAPI routes answer only the methods they name, so a HEAD would be a 405 on every GET
route. This ASGI middleware serves a HEAD as the GET of the same path and sends the
response's start (status, headers, ``Content-Length`` included) without its body.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send


class HeadAsGet:
    """ASGI middleware: a HEAD request is answered as its GET, without the body."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "HEAD":
            await self.app(scope, receive, send)
            return
        # A copy, so the request context still sees (and logs, and counts) a HEAD.
        as_get = {**scope, "method": "GET"}

        async def without_body(message: Message) -> None:
            if message["type"] == "http.response.body":
                if message.get("more_body", False):
                    return
                message = {"type": "http.response.body", "body": b"", "more_body": False}
            await send(message)

        try:
            await self.app(as_get, receive, without_body)
        finally:
            # The request context labels metrics and logs with the route the router matched.
            if "route" in as_get:
                scope["route"] = as_get["route"]

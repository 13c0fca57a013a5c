"""The heartbeat's common case, served beneath the framework.

Every device heartbeats once a minute, so this one request is most of the API's load,
and its common case needs none of FastAPI's routing, dependency and response machinery:
a valid ``X-Anonymous-Id``, no body, an Active session to extend. This ASGI middleware
serves exactly that case — one header, one UPDATE, one answer — and passes every other
request on untouched. The documented route then does the rest: it validates the header
and the body, starts a session when none is Active, and renders every refusal. For the
same request both give the same answer. ``bench/heartbeat.py`` measures the gain.
"""

from __future__ import annotations

import uuid

from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from pin_sessions.platform.clock import Clock
from pin_sessions.platform.database import Database
from pin_sessions.platform.errors import AppError
from pin_sessions.platform.http.problems import app_error_response
from pin_sessions.user_activity.http import ANONYMOUS_ID_HEADER, HEARTBEAT_PATH
from pin_sessions.user_activity.operations import extend_session
from pin_sessions.user_activity.schemas import HeartbeatAccepted

_DEVICE_HEADER = ANONYMOUS_ID_HEADER.encode()


class HeartbeatShortcut:
    """ASGI middleware: answer a plain heartbeat of an Active session; pass on the rest."""

    # The request-context middleware labels metrics with the matched route's ``path``;
    # the shortcut stands in for the route it bypasses.
    path = HEARTBEAT_PATH

    def __init__(self, app: ASGIApp, *, database: Database, clock: Clock) -> None:
        self.app = app
        self.database = database
        self.clock = clock

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        anonymous_id = _plain_heartbeat(scope)
        if anonymous_id is None:
            await self.app(scope, receive, send)
            return
        try:
            session = await extend_session(self.database, anonymous_id, self.clock.now())
        except AppError as exc:
            await app_error_response(Request(scope), exc)(scope, receive, send)
            return
        if session is None:
            # Nothing Active: the route starts a session, which needs the caller and the device.
            await self.app(scope, receive, send)
            return
        scope["route"] = self
        body = (
            HeartbeatAccepted(
                session_id=session.id, last_activity_at=session.last_activity_at, restarted=False
            )
            .model_dump_json(by_alias=True)
            .encode()
        )
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


def _plain_heartbeat(scope: Scope) -> uuid.UUID | None:
    """The device of a bodiless heartbeat with a valid ``X-Anonymous-Id``; else None."""
    if scope["type"] != "http" or scope["path"] != HEARTBEAT_PATH or scope["method"] != "POST":
        return None
    device: bytes | None = None
    for name, value in scope["headers"]:
        if name == _DEVICE_HEADER:
            # The first one counts, as for the route's `request.headers.get`.
            device = device or value
        elif name == b"transfer-encoding" or (name == b"content-length" and value != b"0"):
            return None  # a body to validate
    if device is None:
        return None
    try:
        return uuid.UUID(device.decode("latin-1"))
    except ValueError:
        return None

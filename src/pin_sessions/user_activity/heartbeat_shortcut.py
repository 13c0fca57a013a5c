"""The heartbeat's common case, served beneath the framework.

Every device heartbeats once a minute, so this one request is most of the API's load,
and its common case needs none of FastAPI's routing, dependency and response machinery:
a valid ``X-Anonymous-Id``, no body, an Active session to extend. This ASGI middleware
serves exactly that case — one header, one UPDATE, one answer — and passes every other
request on untouched. The documented route then does the rest: it validates the header
and the body, starts a session when none is Active, and renders every refusal. For the
same request both give the same answer: both parse the header with the same function and
judge a Bearer token by the same check, which needs no database, and both render errors
through the same renderer, counted and logged under the route's template.
``bench/heartbeat.py`` measures the gain.
"""

from __future__ import annotations

import uuid

from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from pin_sessions.platform.auth import Authenticator
from pin_sessions.platform.clock import Clock
from pin_sessions.platform.database import Database
from pin_sessions.platform.errors import AppError
from pin_sessions.platform.http.anonymous_id import ANONYMOUS_ID_HEADER, parse_anonymous_id
from pin_sessions.platform.http.problems import app_error_response
from pin_sessions.user_activity.http import HEARTBEAT_PATH
from pin_sessions.user_activity.operations import extend_session
from pin_sessions.user_activity.schemas import HeartbeatAccepted

_DEVICE_HEADER = ANONYMOUS_ID_HEADER.lower().encode()


class HeartbeatShortcut:
    """ASGI middleware: answer a plain heartbeat of an Active session; pass on the rest."""

    # The request-context middleware labels metrics with the matched route's ``path``;
    # the shortcut stands in for the route it bypasses.
    path = HEARTBEAT_PATH

    def __init__(
        self, app: ASGIApp, *, database: Database, clock: Clock, authenticator: Authenticator
    ) -> None:
        self.app = app
        self.database = database
        self.clock = clock
        # The route's own check of a Bearer token, so both refuse the same tokens.
        self.claimed_user = authenticator.claimed_user()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        plain = _plain_heartbeat(scope)
        if plain is None:
            await self.app(scope, receive, send)
            return
        anonymous_id, with_token = plain
        try:
            if with_token:
                await self.claimed_user(Request(scope))
            session = await extend_session(self.database, anonymous_id, self.clock.now())
        except AppError as exc:
            scope["route"] = self
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


def _plain_heartbeat(scope: Scope) -> tuple[uuid.UUID, bool] | None:
    """A bodiless heartbeat's device, when valid, and whether it has credentials; else None."""
    if scope["type"] != "http" or scope["path"] != HEARTBEAT_PATH or scope["method"] != "POST":
        return None
    device: bytes | None = None
    with_token = False
    for name, value in scope["headers"]:
        if name == _DEVICE_HEADER:
            # The first one counts, as for the route's `request.headers.get`.
            device = device or value
        elif name == b"authorization":
            with_token = True
        elif name == b"transfer-encoding" or (name == b"content-length" and value != b"0"):
            return None  # a body to validate
    if device is None:
        return None
    anonymous_id = parse_anonymous_id(device.decode("latin-1"))
    return None if anonymous_id is None else (anonymous_id, with_token)

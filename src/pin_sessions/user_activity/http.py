"""HTTP routes of user-activity (SPEC §4): the Session API, the manager and internal routes.

A guest is known by ``X-Anonymous-Id``, a user by Bearer. The client's IP address is
the connection's peer, or ``X-Forwarded-For`` when that peer is a trusted proxy; it is
stored with the session and never returned.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Path, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError

from pin_sessions.platform.auth import AuthenticationRequired, Authenticator, UserPrincipal
from pin_sessions.platform.http.client_address import request_client_ip
from pin_sessions.platform.runtime import Runtime
from pin_sessions.user_activity import history, operations
from pin_sessions.user_activity.domain import (
    DeviceInfo,
    device_info,
    duration_seconds,
)
from pin_sessions.user_activity.errors import AnonymousIdInvalid, AnonymousIdRequired
from pin_sessions.user_activity.schemas import (
    ActionRecorded,
    ActionRequest,
    DeviceLink,
    EndViewRequest,
    HeartbeatAccepted,
    HeartbeatRequest,
    History,
    LinkRequest,
    PropertyViewRequest,
    SessionLinked,
    SessionStarted,
    StartRequest,
    ViewEnded,
    ViewStarted,
)

ANONYMOUS_ID_HEADER = "x-anonymous-id"
HEARTBEAT_PATH = "/api/user-activity/sessions/heartbeat"
# Every device heartbeats once a minute: a log line for each success would drown the rest.
# Metrics still count them; failures are still logged.
QUIET_PATHS = (HEARTBEAT_PATH,)
VIEW_BY_USER_PERMISSION = "user-activity.history.view-by-user"
INTERNAL_SCOPE = "user-activity.internal"
ADMIN_SCOPE = "admin"

HEARTBEAT_OPENAPI: dict[str, Any] = {
    "parameters": [
        {
            "name": "X-Anonymous-Id",
            "in": "header",
            "required": True,
            "schema": {"type": "string", "format": "uuid"},
        }
    ],
    "requestBody": {
        "required": False,
        "content": {"application/json": {"schema": HeartbeatRequest.model_json_schema()}},
    },
}

# A plain string, parsed by `history.page_size`, so a bad limit is a 400 like a bad cursor.
LimitParam = Annotated[
    str | None,
    Query(description=f"1 to {history.MAX_PAGE_SIZE}; {history.DEFAULT_PAGE_SIZE} when absent"),
]
CursorParam = Annotated[str | None, Query()]


def parse_anonymous_id(text: str, *, where: str = "X-Anonymous-Id") -> uuid.UUID:
    try:
        return uuid.UUID(text)
    except ValueError:
        raise AnonymousIdInvalid(f"{where} must be a UUID") from None


# Dependencies are coroutines: FastAPI would run a plain function in a worker thread.
async def optional_anonymous_id(request: Request) -> uuid.UUID | None:
    text = request.headers.get(ANONYMOUS_ID_HEADER)
    return None if text is None else parse_anonymous_id(text)


async def required_anonymous_id(request: Request) -> uuid.UUID:
    anonymous_id = await optional_anonymous_id(request)
    if anonymous_id is None:
        raise AnonymousIdRequired()
    return anonymous_id


OptionalDevice = Annotated[uuid.UUID | None, Depends(optional_anonymous_id)]
RequiredDevice = Annotated[uuid.UUID, Depends(required_anonymous_id)]


def build_user_activity_routers(runtime: Runtime, authenticator: Authenticator) -> list[APIRouter]:
    """The public Session API and the internal routes for other services."""
    return [_public_router(runtime, authenticator), _internal_router(runtime, authenticator)]


def _device_reader(runtime: Runtime) -> Callable[[Request], DeviceInfo]:
    trusted = runtime.settings.trusted_proxies

    def read(request: Request) -> DeviceInfo:
        return device_info(request.headers.get("user-agent"), request_client_ip(request, trusted))

    return read


def _public_router(runtime: Runtime, authenticator: Authenticator) -> APIRouter:
    router = APIRouter(prefix="/api/user-activity", tags=["user-activity"])
    db, clock = runtime.database, runtime.clock
    read_device = _device_reader(runtime)
    optional_user = authenticator.optional_user()
    # Defaults, not Annotated aliases: string annotations cannot see a local alias.
    guest_or_user = Depends(optional_user)
    signed_in = Depends(authenticator.user())
    manager_only = Depends(authenticator.user(VIEW_BY_USER_PERMISSION))

    # Every device, once a minute. The common case — an Active session to extend — never
    # gets here: `HeartbeatShortcut` answers it. This route serves the rest (restarts, a
    # body to validate, refusals) and is the operation's one description in OpenAPI, via
    # `openapi_extra` and `responses`, as it reads its header and optional body itself.
    @router.post(
        HEARTBEAT_PATH.removeprefix(router.prefix),
        response_class=Response,
        responses={200: {"model": HeartbeatAccepted, "description": "The session now"}},
        openapi_extra=HEARTBEAT_OPENAPI,
    )
    async def heartbeat(request: Request) -> Response:
        """Extend the device's Active session; a new one starts when there is none."""
        anonymous_id = await required_anonymous_id(request)
        await _refuse_fields(request, HeartbeatRequest)

        # Who is calling matters only for a restart, so the common path skips the
        # Bearer check's database query.
        async def newcomer() -> tuple[uuid.UUID | None, DeviceInfo]:
            return _user_id(await optional_user(request)), read_device(request)

        result = await operations.heartbeat(db, anonymous_id, clock.now(), newcomer=newcomer)
        accepted = HeartbeatAccepted(
            session_id=result.session_id,
            last_activity_at=result.last_activity_at,
            restarted=result.restarted,
        )
        return Response(accepted.model_dump_json(by_alias=True), media_type="application/json")

    @router.post("/sessions/start", response_model=SessionStarted)
    async def start(
        request: Request,
        anonymous_id: OptionalDevice,
        _body: Annotated[StartRequest | None, Body()] = None,
        user: UserPrincipal | None = guest_or_user,
    ) -> SessionStarted:
        """Start the device's session or continue it (INV-SES-001); issues an AnonymousId."""
        started = await operations.start_session(
            db, anonymous_id, _user_id(user), read_device(request), clock.now()
        )
        session = started.session
        return SessionStarted(
            session_id=session.id,
            anonymous_id=session.anonymous_id,
            user_id=session.user_id,
            status=session.status.value,
            created_at=session.created_at,
            last_activity_at=session.last_activity_at,
            created=started.created,
        )

    @router.post("/sessions/link", response_model=SessionLinked)
    async def link(
        request: Request,
        _body: Annotated[LinkRequest | None, Body()] = None,
        user: UserPrincipal = signed_in,
        *,
        anonymous_id: RequiredDevice,
    ) -> SessionLinked:
        """Link the device's session to the caller (INV-SES-002)."""
        outcome = await operations.link(
            db, anonymous_id, user.user_id, read_device(request), clock.now()
        )
        session = outcome.session
        assert session.user_id is not None and session.linked_at is not None
        return SessionLinked(
            session_id=session.id,
            user_id=session.user_id,
            linked_at=session.linked_at,
            switched=outcome.switched,
        )

    @router.get("/sessions", response_model=History)
    async def own_history(
        request: Request,
        limit: LimitParam = None,
        cursor: CursorParam = None,
        user: UserPrincipal | None = guest_or_user,
    ) -> History:
        """A user's own sessions, or a guest's own device's unlinked sessions."""
        if user is not None:
            page = await history.user_history(
                db, user.user_id, limit=history.page_size(limit), cursor=cursor, now=clock.now()
            )
        else:
            anonymous_id = await optional_anonymous_id(request)
            if anonymous_id is None:
                raise AuthenticationRequired("a Bearer token or X-Anonymous-Id is required")
            page = await history.device_history(
                db, anonymous_id, limit=history.page_size(limit), cursor=cursor, now=clock.now()
            )
        return _history(page)

    @router.post("/actions", status_code=201, response_model=ActionRecorded)
    async def record_action(
        request: Request,
        body: ActionRequest,
        user: UserPrincipal | None = guest_or_user,
        *,
        anonymous_id: RequiredDevice,
    ) -> ActionRecorded:
        """Record an action; it counts as activity of the device's session."""
        recorded = await operations.record_action(
            db,
            anonymous_id,
            _user_id(user),
            read_device(request),
            clock.now(),
            action_type=body.type,
            property_object_id=body.property_object_id,
            data=body.data,
        )
        return ActionRecorded(action_id=recorded.action_id, session_id=recorded.session_id)

    @router.post("/property-views", status_code=201, response_model=ViewStarted)
    async def start_view(
        request: Request,
        body: PropertyViewRequest,
        user: UserPrincipal | None = guest_or_user,
        *,
        anonymous_id: RequiredDevice,
    ) -> ViewStarted:
        """Start viewing a property object; counts as activity."""
        started = await operations.start_view(
            db,
            anonymous_id,
            _user_id(user),
            read_device(request),
            clock.now(),
            property_object_id=body.property_object_id,
        )
        return ViewStarted(
            view_id=started.view_id, session_id=started.session_id, started_at=started.started_at
        )

    @router.post("/property-views/{viewId}/end", response_model=ViewEnded)
    async def end_view(
        view_id: Annotated[uuid.UUID, Path(alias="viewId")],
        _body: Annotated[EndViewRequest | None, Body()] = None,
        user: UserPrincipal | None = guest_or_user,
        *,
        anonymous_id: RequiredDevice,
    ) -> ViewEnded:
        """End a view of this device; ending it again reports the same duration."""
        del user  # authenticated when present, but the device owns its views
        ended = await operations.end_view(db, anonymous_id, view_id, clock.now())
        return ViewEnded(
            view_id=ended.view_id,
            duration_seconds=duration_seconds(ended.duration),
        )

    @router.get("/users/{userId}/sessions", response_model=History)
    async def user_history(
        user_id: Annotated[uuid.UUID, Path(alias="userId")],
        limit: LimitParam = None,
        cursor: CursorParam = None,
        manager: UserPrincipal = manager_only,
    ) -> History:
        """Any user's history, for holders of ``user-activity.history.view-by-user``."""
        del manager
        return _history(
            await history.user_history(
                db, user_id, limit=history.page_size(limit), cursor=cursor, now=clock.now()
            )
        )

    return router


def _internal_router(runtime: Runtime, authenticator: Authenticator) -> APIRouter:
    router = APIRouter(prefix="/internal", tags=["user-activity internal"])
    db, clock = runtime.database, runtime.clock
    Internal = Depends(authenticator.machine(INTERNAL_SCOPE))
    InternalOrAdmin = Depends(authenticator.machine(INTERNAL_SCOPE, ADMIN_SCOPE))

    @router.get("/sessions/{anonymousId}/link", response_model=DeviceLink, dependencies=[Internal])
    async def device_link(anonymous_id: Annotated[str, Path(alias="anonymousId")]) -> DeviceLink:
        """Which user the device is linked to now (for favorites)."""
        return DeviceLink.model_validate(
            await history.device_link(db, parse_anonymous_id(anonymous_id, where="anonymousId"))
        )

    @router.get("/users/{userId}/sessions", response_model=History, dependencies=[InternalOrAdmin])
    async def user_history(
        user_id: Annotated[uuid.UUID, Path(alias="userId")],
        limit: LimitParam = None,
        cursor: CursorParam = None,
    ) -> History:
        """A user's history for services (crm) and platform administrators."""
        return _history(
            await history.user_history(
                db, user_id, limit=history.page_size(limit), cursor=cursor, now=clock.now()
            )
        )

    return router


async def _refuse_fields(request: Request, model: type[BaseModel]) -> None:
    """Validate an optional body the way FastAPI would: unknown fields are a 422."""
    body = await request.body()
    if not body:
        return
    try:
        model.model_validate_json(body)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        raise RequestValidationError(
            [{**error, "loc": ("body", *error["loc"])} for error in errors]
        ) from None


def _user_id(user: UserPrincipal | None) -> uuid.UUID | None:
    return None if user is None else user.user_id


def _history(page: history.HistoryPage) -> History:
    return History.model_validate({"items": page.items, "nextCursor": page.next_cursor})

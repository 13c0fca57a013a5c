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
from pin_sessions.platform.http.anonymous_id import (
    ANONYMOUS_ID_HEADER,
    anonymous_id_parameter,
    parse_anonymous_id,
)
from pin_sessions.platform.http.client_address import request_client_ip
from pin_sessions.platform.http.openapi import parameters, problems, query_parameter
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

HEARTBEAT_PATH = "/api/user-activity/sessions/heartbeat"
# Every device heartbeats once a minute: a log line for each success would drown the rest.
# Metrics still count them; failures are still logged.
QUIET_PATHS = (HEARTBEAT_PATH,)
VIEW_BY_USER_PERMISSION = "user-activity.history.view-by-user"
INTERNAL_SCOPE = "user-activity.internal"
ADMIN_SCOPE = "admin"

# Read by hand (`optional_anonymous_id`), so a missing or bad header is our 400, not a 422.
OPTIONAL_DEVICE = parameters(anonymous_id_parameter(required=False))
REQUIRED_DEVICE = parameters(anonymous_id_parameter(required=True))
HEARTBEAT_OPENAPI: dict[str, Any] = {
    **REQUIRED_DEVICE,
    "requestBody": {
        "required": False,
        "content": {"application/json": {"schema": HeartbeatRequest.model_json_schema()}},
    },
}
# Errors every guest-or-user route with a body can answer: a bad device header or JSON
# (400), a bad Bearer token (401), a body over the limit (413) or refused (422), and a
# database that did not answer in time (503).
DEVICE_BODY_PROBLEMS = problems(400, 401, 413, 422, 503)

# A plain string, parsed by `history.page_size`, so a bad limit is a 400 like a bad cursor;
# the document describes it as the integer it must be.
LimitParam = Annotated[str | None, Query(include_in_schema=False)]
CursorParam = Annotated[str | None, Query(include_in_schema=False)]
LIMIT_PARAMETER = query_parameter(
    "limit",
    {
        "type": "integer",
        "minimum": 1,
        "maximum": history.MAX_PAGE_SIZE,
        "default": history.DEFAULT_PAGE_SIZE,
    },
    f"1 to {history.MAX_PAGE_SIZE}; anything else is 400 USER_ACTIVITY_LIMIT_INVALID",
)
CURSOR_PARAMETER = query_parameter(
    "cursor", {"type": "string"}, "The previous page's `nextCursor`; else 400"
)
PAGE_PARAMETERS = (LIMIT_PARAMETER, CURSOR_PARAMETER)


def device_id(text: str, *, where: str = ANONYMOUS_ID_HEADER) -> uuid.UUID:
    """The device ``text`` names; a malformed or nil UUID is a 400."""
    anonymous_id = parse_anonymous_id(text)
    if anonymous_id is None:
        raise AnonymousIdInvalid(f"{where} must be a UUID other than the nil UUID")
    return anonymous_id


# Dependencies are coroutines: FastAPI would run a plain function in a worker thread.
async def optional_anonymous_id(request: Request) -> uuid.UUID | None:
    text = request.headers.get(ANONYMOUS_ID_HEADER)
    return None if text is None else device_id(text)


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
    claimed_user = authenticator.claimed_user()
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
        responses={
            200: {"model": HeartbeatAccepted, "description": "The session now"},
            **DEVICE_BODY_PROBLEMS,
        },
        openapi_extra=HEARTBEAT_OPENAPI,
    )
    async def heartbeat(request: Request) -> Response:
        """Extend the device's Active session; a new one starts when there is none."""
        anonymous_id = await required_anonymous_id(request)
        # The token is judged as the shortcut judges it, by its content alone: extending
        # a session must stay one UPDATE, so whether its session is live is not asked here.
        await claimed_user(request)
        await _refuse_fields(request, HeartbeatRequest)

        # Who is calling matters only for a restart: then the Bearer check asks whether
        # the token's session is live.
        async def newcomer() -> tuple[uuid.UUID | None, DeviceInfo]:
            return _user_id(await optional_user(request)), read_device(request)

        result = await operations.heartbeat(db, anonymous_id, clock.now(), newcomer=newcomer)
        accepted = HeartbeatAccepted(
            session_id=result.session_id,
            last_activity_at=result.last_activity_at,
            restarted=result.restarted,
        )
        return Response(accepted.model_dump_json(by_alias=True), media_type="application/json")

    @router.post(
        "/sessions/start",
        response_model=SessionStarted,
        responses=DEVICE_BODY_PROBLEMS,
        openapi_extra=OPTIONAL_DEVICE,
    )
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

    @router.post(
        "/sessions/link",
        response_model=SessionLinked,
        responses=DEVICE_BODY_PROBLEMS,
        openapi_extra=REQUIRED_DEVICE,
    )
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

    @router.get(
        "/sessions",
        response_model=History,
        responses=problems(400, 401, 503),
        openapi_extra=parameters(*PAGE_PARAMETERS, anonymous_id_parameter(required=False)),
    )
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

    @router.post(
        "/actions",
        status_code=201,
        response_model=ActionRecorded,
        responses=DEVICE_BODY_PROBLEMS,
        openapi_extra=REQUIRED_DEVICE,
    )
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

    @router.post(
        "/property-views",
        status_code=201,
        response_model=ViewStarted,
        responses=DEVICE_BODY_PROBLEMS,
        openapi_extra=REQUIRED_DEVICE,
    )
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

    @router.post(
        "/property-views/{viewId}/end",
        response_model=ViewEnded,
        responses=problems(400, 401, 404, 413, 422, 503),
        openapi_extra=REQUIRED_DEVICE,
    )
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

    @router.get(
        "/users/{userId}/sessions",
        response_model=History,
        responses=problems(400, 401, 403, 422, 503),
        openapi_extra=parameters(*PAGE_PARAMETERS),
    )
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

    @router.get(
        "/sessions/{anonymousId}/link",
        response_model=DeviceLink,
        dependencies=[Internal],
        responses=problems(400, 401, 403, 404, 503),
    )
    async def device_link(
        anonymous_id: Annotated[
            str, Path(alias="anonymousId", json_schema_extra={"format": "uuid"})
        ],
    ) -> DeviceLink:
        """Which user the device is linked to now (for favorites)."""
        return DeviceLink.model_validate(
            await history.device_link(db, device_id(anonymous_id, where="anonymousId"))
        )

    @router.get(
        "/users/{userId}/sessions",
        response_model=History,
        dependencies=[InternalOrAdmin],
        responses=problems(400, 401, 403, 422, 503),
        openapi_extra=parameters(*PAGE_PARAMETERS),
    )
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

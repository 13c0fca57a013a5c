"""HTTP routes of user-activity's Session API (SPEC §4): the ``/sessions`` routes, with the
heartbeat; what a device records and reads back is in ``activity_http``, the routes for
other services in ``internal_http``.

A guest is known by ``X-Anonymous-Id``, a user by Bearer. The client's IP address is
the connection's peer, or ``X-Forwarded-For`` when that peer is a trusted proxy; it is
stored with the session and never returned. Routes are module-level and take what they
need from ``platform.http.dependencies``; the composition root mounts ``router`` and
``activity_http.router``, in that order (the order of SPEC §4 and of the document). The
request readers both modules share (the device, the caller, the page parameters) are here.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Depends, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from pydantic import ValidationError

from pin_sessions.platform.auth import UserPrincipal
from pin_sessions.platform.auth_errors import (
    AuthenticationRequired,
    MissingPermission,
    UserTokenRequired,
)
from pin_sessions.platform.http.anonymous_id import (
    AnonymousIdInvalid,
    AnonymousIdRequired,
    OptionalDevice,
    RequiredDevice,
    anonymous_id_parameter,
    required_device,
)
from pin_sessions.platform.http.client_address import request_client_ip
from pin_sessions.platform.http.dependencies import (
    ClientIp,
    CurrentUser,
    DatabaseDep,
    Now,
    OptionalUser,
    ReadsDep,
    optional_user,
    permission_required,
)
from pin_sessions.platform.http.headers import DuplicateHeader
from pin_sessions.platform.http.idempotency_key import (
    IdempotencyKey,
    IdempotencyKeyInvalid,
    idempotency_key_parameter,
)
from pin_sessions.platform.http.openapi import parameters, problems, query_parameter
from pin_sessions.platform.http.security_schemes import OPTIONAL_USER
from pin_sessions.platform.http.wiring import request_services
from pin_sessions.platform.permissions import DEV_STATS_VIEW
from pin_sessions.user_activity import history, linking, sessions
from pin_sessions.user_activity.domain import DeviceInfo, SignedInCaller, device_info
from pin_sessions.user_activity.errors import CursorInvalid, LimitInvalid, SessionAlreadyEnded
from pin_sessions.user_activity.linking import StaleLinks
from pin_sessions.user_activity.schemas import (
    HeartbeatAccepted,
    HeartbeatRequest,
    History,
    LinkRequest,
    OpenSessions,
    SessionLinked,
    SessionStarted,
    StartRequest,
)
from pin_sessions.user_activity.services import UserActivityDep, UserActivityServices

PREFIX = "/api/user-activity"
HEARTBEAT_PATH = f"{PREFIX}/sessions/heartbeat"
# Every device heartbeats once a minute: a log line for each success would drown the rest.
# Metrics still count them; failures are still logged.
QUIET_PATHS = (HEARTBEAT_PATH,)

# Read by hand (`optional_device`), so a missing or bad header is our 400, not a 422.
OPTIONAL_DEVICE = parameters(anonymous_id_parameter(required=False))
REQUIRED_DEVICE = parameters(anonymous_id_parameter(required=True))
# Errors every guest-or-user route with a body can answer: a bad device header or JSON
# (400), a bad Bearer token (401), a body over the limit (413) or refused (422), and a
# database that did not answer in time (503).
DEVICE_ANSWERS = (400, 401, 413, 422, 503, AnonymousIdInvalid, AnonymousIdRequired)
DEVICE_BODY_PROBLEMS = problems(*DEVICE_ANSWERS)

# A plain string, parsed by `history.page_size`, so a bad limit is a 400 like a bad cursor;
# the document describes it as the integer it must be.
LimitParam = Annotated[str | None, Query(include_in_schema=False)]
CursorParam = Annotated[str | None, Query(include_in_schema=False)]
PAGE_PARAMETERS = (
    query_parameter(
        "limit",
        {
            "type": "integer",
            "minimum": 1,
            "maximum": history.MAX_PAGE_SIZE,
            "default": history.DEFAULT_PAGE_SIZE,
        },
        f"1 to {history.MAX_PAGE_SIZE}; anything else is 400 USER_ACTIVITY_LIMIT_INVALID",
    ),
    query_parameter("cursor", {"type": "string"}, "The previous page's `nextCursor`; else 400"),
)

router = APIRouter(prefix=PREFIX, tags=["user-activity"])


def read_device(request: Request, client_ip: str | None) -> DeviceInfo:
    """The device a session starts with: its user agent, parsed once, and its address."""
    return device_info(request.headers.get("user-agent"), client_ip)


async def _device(request: Request, client_ip: ClientIp) -> DeviceInfo:
    return read_device(request, client_ip)


Device = Annotated[DeviceInfo, Depends(_device)]


def caller_of(user: UserPrincipal | None) -> SignedInCaller | None:
    """A request's signed-in caller, with the instant of the sign-in behind its token."""
    return None if user is None else SignedInCaller(user.user_id, user.signed_in_at)


def history_response(page: history.HistoryPage) -> History:
    return History.model_validate({"items": page.items, "nextCursor": page.next_cursor})


async def heartbeat(request: Request) -> Response:
    """Extend the device's session to now; send it about once a minute while the visitor
    is active. When the session has ended (after 15 idle minutes), a new one starts and
    the answer says `restarted: true` with the new `sessionId`.

    The body is optional (`{}` or none); the server's clock sets every time.
    """
    # Every device, once a minute: by far the most frequent request, so it reads all it
    # needs from the request itself and the app also serves it ahead of the framework
    # (platform.http.fast_path), through this same function. Extending a session is its
    # share of one group-committed UPDATE (heartbeats); only a restart asks whether the
    # caller's token is still live and parses the device.
    anonymous_id = await required_device(request)
    wired = request_services(request)
    given = wired.http
    # The token is judged by its content alone (no database): a bad one is a 401 in every
    # state, and a heartbeat that extends a session stays one statement.
    await given.authenticator.claimed_user(request)
    await _refuse_fields(request)

    async def newcomer() -> tuple[SignedInCaller | None, DeviceInfo]:
        user = await optional_user(request)
        client_ip = request_client_ip(request, given.trusted_proxies)
        return caller_of(user), read_device(request, client_ip)

    heartbeats = wired.contexts.get(UserActivityServices).heartbeats
    result = await sessions.heartbeat(
        heartbeats, given.database, anonymous_id, given.clock.now(), newcomer=newcomer
    )
    accepted = HeartbeatAccepted(
        session_id=result.session_id,
        last_activity_at=result.last_activity_at,
        restarted=result.restarted,
    )
    return Response(accepted.model_dump_json(by_alias=True), media_type="application/json")


router.add_api_route(
    "/sessions/heartbeat",
    heartbeat,
    methods=["POST"],
    operation_id="sendHeartbeat",
    summary="Keep the device's session alive",
    response_class=Response,
    responses={
        200: {"model": HeartbeatAccepted, "description": "The session now"},
        **DEVICE_BODY_PROBLEMS,
    },
    openapi_extra={
        **REQUIRED_DEVICE,
        # It reads the optional Bearer token itself (no dependency says so).
        "security": OPTIONAL_USER.security(),
        "requestBody": {
            "required": False,
            "content": {"application/json": {"schema": HeartbeatRequest.model_json_schema()}},
        },
    },
)
HEARTBEAT_ROUTE = next(
    route for route in router.routes if isinstance(route, APIRoute) and route.endpoint is heartbeat
)


async def _refuse_fields(request: Request) -> None:
    """Validate the optional body the way FastAPI would: unknown fields are a 422."""
    has_body = "transfer-encoding" in request.headers or request.headers.get(
        "content-length", "0"
    ) not in ("", "0")
    body = await request.body() if has_body else b""
    if not body:
        return
    try:
        HeartbeatRequest.model_validate_json(body)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        raise RequestValidationError(
            [{**error, "loc": ("body", *error["loc"])} for error in errors]
        ) from None


@router.post(
    "/sessions/start",
    response_model=SessionStarted,
    operation_id="startSession",
    summary="Start or continue the device's session",
    responses=problems(
        400, 401, 413, 422, 503, AnonymousIdInvalid, IdempotencyKeyInvalid, DuplicateHeader
    ),
    openapi_extra=parameters(
        anonymous_id_parameter(required=False),
        idempotency_key_parameter(
            "1 to 64 printable ASCII characters, read only without X-Anonymous-Id: every start "
            "sent with the same key within 24 hours gets the same anonymousId, and so the "
            "same session, also when the first start's answer was lost"
        ),
    ),
)
async def start(
    db: DatabaseDep,
    now: Now,
    device: Device,
    anonymous_id: OptionalDevice,
    user: OptionalUser,
    key: IdempotencyKey,
    _body: Annotated[StartRequest | None, Body()] = None,
) -> SessionStarted:
    """Start the device's session or continue it: a start on a device that has an Active
    session is a heartbeat of it.

    Without `X-Anonymous-Id` the service issues the device's `anonymousId` (in the answer;
    send it as `X-Anonymous-Id` from then on). Send an `Idempotency-Key` with that first
    start, and the same key with its retries: they all get the same `anonymousId` and
    session.
    """
    started = await sessions.start_session(
        db, anonymous_id, caller_of(user), device, now, idempotency_key=key
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


async def _stale_links(services: UserActivityDep) -> StaleLinks:
    return services.stale_links


# A link never changes an ended session (INV-SES-006): the one conflict it can answer.
LINK_PROBLEMS = problems(
    *DEVICE_ANSWERS, AuthenticationRequired, UserTokenRequired, SessionAlreadyEnded
)


@router.post(
    "/sessions/link",
    response_model=SessionLinked,
    responses=LINK_PROBLEMS,
    operation_id="linkSession",
    summary="Link the device's session to the signed-in user",
    openapi_extra=REQUIRED_DEVICE,
)
async def link(
    db: DatabaseDep,
    now: Now,
    device: Device,
    anonymous_id: RequiredDevice,
    user: CurrentUser,
    stale_links: Annotated[StaleLinks, Depends(_stale_links)],
    _body: Annotated[LinkRequest | None, Body()] = None,
) -> Response:
    """Link the device's session to the caller; call it right after a sign-in.

    Linking the same user again changes nothing. If another user's session is on the
    device, it ends and a new session starts for the caller (`switched: true`). A stale
    link (another user signed in on the device after the caller, and linked it)
    changes nothing and is a 200 all the same, as a repeated link is: it is the outcome of a
    race between sign-ins, not a client's mistake. Its answer is the device's session as it
    is (as a start would show it: another user's, or a guest's with nulls), with
    `stale: true`. `linkedAt` is when the session was linked. An ended session never
    changes: 409 `USER_ACTIVITY_SESSION_ALREADY_ENDED` if the session being linked ended
    meanwhile; linking again links the device's next session.
    """
    caller = SignedInCaller(user.user_id, user.signed_in_at)
    outcome = await linking.link(db, anonymous_id, caller, device, now)
    session = outcome.session
    answer = SessionLinked(
        session_id=session.id,
        user_id=session.user_id,
        linked_at=session.linked_at,
        switched=outcome.switched,
    )
    if outcome.stale:
        stale_links.record(caller, outcome)
        answer.stale = True
    # Only a stale answer carries `stale`: every other is the four members of SPEC §4.
    return Response(
        answer.model_dump_json(by_alias=True, exclude_unset=True), media_type="application/json"
    )


@router.get(
    "/sessions",
    response_model=History,
    operation_id="listMySessions",
    summary="List the caller's sessions, or the device's",
    responses=problems(400, 401, 503, CursorInvalid, LimitInvalid, AuthenticationRequired),
    openapi_extra=parameters(*PAGE_PARAMETERS, anonymous_id_parameter(required=False)),
)
async def own_history(
    reads: ReadsDep,
    now: Now,
    user: OptionalUser,
    anonymous_id: OptionalDevice,
    limit: LimitParam = None,
    cursor: CursorParam = None,
) -> History:
    """A signed-in user's own sessions (every device), or, for a guest, the sessions of
    this device that no user is linked to; newest first, each with its latest actions and
    views. Page with `limit` and `nextCursor`.
    """
    size = history.page_size(limit)
    if user is not None:
        page = await history.user_history(reads, user.user_id, limit=size, cursor=cursor, now=now)
    elif anonymous_id is not None:
        page = await history.device_history(reads, anonymous_id, limit=size, cursor=cursor, now=now)
    else:
        raise AuthenticationRequired("a Bearer token or X-Anonymous-Id is required")
    return history_response(page)


@router.get(
    "/sessions/open-count",
    response_model=OpenSessions,
    operation_id="countOpenSessions",
    summary="Count the sessions open right now",
    responses=problems(400, 401, 403, 503, AuthenticationRequired, MissingPermission),
    dependencies=[permission_required(DEV_STATS_VIEW)],
)
async def open_sessions(db: DatabaseDep, now: Now) -> OpenSessions:
    """The sessions open right now, for holders of the `dev-stats.view` permission."""
    # dev-stats learns of a session only when it ends, so the live count comes from here,
    # to the same readers.
    count = await history.count_open_sessions(db)
    return OpenSessions(open_sessions=count, counted_at=now)

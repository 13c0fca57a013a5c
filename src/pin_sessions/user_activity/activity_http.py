"""HTTP routes of what a device records and reads back (SPEC §4): its actions and property
views, a user's history for managers, and the caller's export (SPEC §10).

The ``/sessions`` routes and the heartbeat are in ``http``, with the request readers these
routes share; the composition root mounts this ``router`` right after ``http.router``.
"""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Body, Depends, Path, Request
from fastapi.responses import StreamingResponse

from pin_sessions.platform.auth_errors import (
    AuthenticationRequired,
    MissingPermission,
    UserTokenRequired,
)
from pin_sessions.platform.http.anonymous_id import (
    AnonymousIdInvalid,
    AnonymousIdRequired,
    RequiredDevice,
    anonymous_id_parameter,
)
from pin_sessions.platform.http.dependencies import (
    ClaimedUser,
    DatabaseDep,
    Now,
    OptionalUser,
    ReadsDep,
    live_user,
    optional_user,
    permission_required,
)
from pin_sessions.platform.http.idempotency_key import (
    IdempotencyKey,
    IdempotencyKeyInvalid,
    idempotency_key_parameter,
)
from pin_sessions.platform.http.openapi import parameters, problems
from pin_sessions.platform.permissions import HISTORY_VIEW_BY_USER
from pin_sessions.platform.streamed_json import stream_json
from pin_sessions.user_activity import history, recording
from pin_sessions.user_activity.domain import duration_seconds
from pin_sessions.user_activity.errors import (
    CursorInvalid,
    IdempotencyKeyReused,
    LimitInvalid,
    UserErased,
    ViewNotFound,
)
from pin_sessions.user_activity.http import (
    DEVICE_ANSWERS,
    PAGE_PARAMETERS,
    PREFIX,
    REQUIRED_DEVICE,
    CursorParam,
    Device,
    LimitParam,
    caller_of,
    history_response,
)
from pin_sessions.user_activity.idempotency import request_hash
from pin_sessions.user_activity.schemas import (
    EXPORT_EXAMPLE,
    ActionRecorded,
    ActionRequest,
    EndViewRequest,
    History,
    PropertyViewRequest,
    ViewEnded,
    ViewStarted,
)
from pin_sessions.user_activity.services import UserActivityDep
from pin_sessions.user_activity.user_data import ActivityData

# The routes that record something new: a retried POST after a lost answer records once.
IDEMPOTENT_DEVICE = parameters(anonymous_id_parameter(required=True), idempotency_key_parameter())

RECORDING_PROBLEMS = problems(*DEVICE_ANSWERS, IdempotencyKeyInvalid, IdempotencyKeyReused)

router = APIRouter(prefix=PREFIX, tags=["user-activity"])


@router.post(
    "/actions",
    status_code=201,
    response_model=ActionRecorded,
    operation_id="recordAction",
    summary="Record what the visitor did",
    responses=RECORDING_PROBLEMS,
    openapi_extra=IDEMPOTENT_DEVICE,
)
async def record_action(
    body: ActionRequest,
    db: DatabaseDep,
    now: Now,
    device: Device,
    anonymous_id: RequiredDevice,
    user: OptionalUser,
    key: IdempotencyKey,
) -> ActionRecorded:
    """Record an action (`type`, optionally the property object and up to 8 KiB of JSON
    `data`) in the device's session; it counts as activity. A device without an open
    session starts one.

    With `Idempotency-Key`, a repeat within 24 hours records nothing and gets the first
    answer; the same key with another body is 422 `USER_ACTIVITY_IDEMPOTENCY_KEY_REUSED`.
    """
    recorded = await recording.record_action(
        db,
        anonymous_id,
        caller_of(user),
        device,
        now,
        action_type=body.type,
        property_object_id=body.property_object_id,
        data=body.data,
        idempotency=_idempotency(key, "actions", body),
    )
    return ActionRecorded(action_id=recorded.action_id, session_id=recorded.session_id)


@router.post(
    "/property-views",
    status_code=201,
    response_model=ViewStarted,
    operation_id="startPropertyView",
    summary="Start viewing a property object",
    responses=RECORDING_PROBLEMS,
    openapi_extra=IDEMPOTENT_DEVICE,
)
async def start_view(
    body: PropertyViewRequest,
    db: DatabaseDep,
    now: Now,
    device: Device,
    anonymous_id: RequiredDevice,
    user: OptionalUser,
    key: IdempotencyKey,
) -> ViewStarted:
    """Start a view of a property object in the device's session; it counts as activity.
    End it with `endPropertyView`; a view still open when its session ends ends with it.
    `Idempotency-Key` as for `recordAction`.
    """
    started = await recording.start_view(
        db,
        anonymous_id,
        caller_of(user),
        device,
        now,
        property_object_id=body.property_object_id,
        idempotency=_idempotency(key, "property-views", body),
    )
    return ViewStarted(
        view_id=started.view_id, session_id=started.session_id, started_at=started.started_at
    )


@router.post(
    "/property-views/{viewId}/end",
    response_model=ViewEnded,
    operation_id="endPropertyView",
    summary="End a property view",
    responses=problems(
        400, 401, 413, 422, 503, AnonymousIdInvalid, AnonymousIdRequired, ViewNotFound
    ),
    openapi_extra=REQUIRED_DEVICE,
    # Credentials, when sent, must be valid; but the device owns its views, not the user.
    dependencies=[Depends(optional_user)],
)
async def end_view(
    view_id: Annotated[uuid.UUID, Path(alias="viewId")],
    db: DatabaseDep,
    now: Now,
    anonymous_id: RequiredDevice,
    _body: Annotated[EndViewRequest | None, Body()] = None,
) -> ViewEnded:
    """End a view this device started; ending it again reports the same duration. Another
    device's view is a 404."""
    ended = await recording.end_view(db, anonymous_id, view_id, now)
    return ViewEnded(view_id=ended.view_id, duration_seconds=duration_seconds(ended.duration))


@router.get(
    "/users/{userId}/sessions",
    response_model=History,
    operation_id="listUserSessions",
    summary="List any user's sessions (staff)",
    responses=problems(
        400,
        401,
        403,
        422,
        503,
        CursorInvalid,
        LimitInvalid,
        AuthenticationRequired,
        UserTokenRequired,
        MissingPermission,
    ),
    openapi_extra=parameters(*PAGE_PARAMETERS),
    dependencies=[permission_required(HISTORY_VIEW_BY_USER)],
)
async def user_history(
    user_id: Annotated[uuid.UUID, Path(alias="userId")],
    reads: ReadsDep,
    now: Now,
    limit: LimitParam = None,
    cursor: CursorParam = None,
) -> History:
    """Any user's sessions with their actions and views, newest first, for holders of the
    `user-activity.history.view-by-user` permission."""
    page = await history.user_history(
        reads, user_id, limit=history.page_size(limit), cursor=cursor, now=now
    )
    return history_response(page)


def _idempotency(
    key: str | None, operation: str, body: ActionRequest | PropertyViewRequest
) -> recording.Idempotency | None:
    if key is None:
        return None
    return recording.Idempotency(key, request_hash(operation, body.model_dump_json()))


async def _activity_data(services: UserActivityDep) -> ActivityData:
    return services.data


@router.get(
    "/me/export",
    response_class=StreamingResponse,
    operation_id="exportMyActivity",
    summary="Download every session, view and action of the caller",
    responses={
        200: {
            "description": "Every session, view and action of the caller, streamed",
            "content": {
                "application/json": {"schema": {"type": "object"}, "example": EXPORT_EXAMPLE}
            },
        },
        **problems(400, 401, 503, AuthenticationRequired, UserTokenRequired, UserErased),
    },
)
async def export_me(
    request: Request,
    claimed: ClaimedUser,
    data: Annotated[ActivityData, Depends(_activity_data)],
    now: Now,
) -> StreamingResponse:
    """The caller's sessions with their views and actions, as one JSON document; IP
    addresses masked."""
    document = await data.export(claimed.user_id, now)
    await live_user(request)
    return StreamingResponse(
        stream_json(document),
        media_type="application/json",
        headers={"Cache-Control": "no-store"},
    )

"""user-activity's internal API for other services: m2m tokens only."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path

from pin_sessions.platform.auth_errors import (
    AuthenticationRequired,
    ClientDisabled,
    MissingScope,
    WrongTokenKind,
)
from pin_sessions.platform.http.anonymous_id import AnonymousIdInvalid, device_id
from pin_sessions.platform.http.dependencies import DatabaseDep, scope_required
from pin_sessions.platform.http.openapi import parameters, problems
from pin_sessions.platform.permissions import ADMIN, USER_ACTIVITY_INTERNAL
from pin_sessions.user_activity import history
from pin_sessions.user_activity.activity_http import user_history
from pin_sessions.user_activity.errors import CursorInvalid, DeviceNotFound, LimitInvalid
from pin_sessions.user_activity.http import PAGE_PARAMETERS
from pin_sessions.user_activity.schemas import DeviceLink, History

router = APIRouter(prefix="/internal", tags=["user-activity internal"])
# A service's token: none, a user's, a disabled client's, or without the scope.
_SERVICE = (AuthenticationRequired, ClientDisabled, WrongTokenKind, MissingScope)


@router.get(
    "/sessions/{anonymousId}/link",
    response_model=DeviceLink,
    dependencies=[scope_required(USER_ACTIVITY_INTERNAL)],
    operation_id="getDeviceLink",
    summary="Which user a device is linked to (services)",
    responses=problems(400, 401, 403, 503, *_SERVICE, AnonymousIdInvalid, DeviceNotFound),
)
async def device_link(
    anonymous_id: Annotated[str, Path(alias="anonymousId", json_schema_extra={"format": "uuid"})],
    db: DatabaseDep,
) -> DeviceLink:
    """The user the device's latest session is linked to, and since when; `userId` and
    `linkedAt` are null while the device's visitor has not signed in. Needs a service token
    with the `user-activity.internal` scope.
    """
    found = await history.device_link(db, device_id(anonymous_id, where="anonymousId"))
    return DeviceLink.model_validate(found)


# The manager route's endpoint, behind a service's scope instead of a user's permission.
router.add_api_route(
    "/users/{userId}/sessions",
    user_history,
    methods=["GET"],
    response_model=History,
    dependencies=[scope_required(USER_ACTIVITY_INTERNAL, ADMIN)],
    responses=problems(400, 401, 403, 422, 503, *_SERVICE, CursorInvalid, LimitInvalid),
    openapi_extra=parameters(*PAGE_PARAMETERS),
    operation_id="listUserSessionsForServices",
    summary="List a user's sessions (services)",
    description=(
        "A user's sessions with their actions and views, newest first, for services (a "
        "service token with the `user-activity.internal` or `admin` scope)."
    ),
)

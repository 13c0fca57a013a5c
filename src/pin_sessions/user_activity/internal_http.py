"""user-activity's internal API for other services (SPEC §4): m2m tokens only."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path

from pin_sessions.platform.http.anonymous_id import device_id
from pin_sessions.platform.http.dependencies import DatabaseDep, scope_required
from pin_sessions.platform.http.openapi import parameters, problems
from pin_sessions.platform.permissions import ADMIN, USER_ACTIVITY_INTERNAL
from pin_sessions.user_activity import history
from pin_sessions.user_activity.activity_http import user_history
from pin_sessions.user_activity.http import PAGE_PARAMETERS
from pin_sessions.user_activity.schemas import DeviceLink, History

router = APIRouter(prefix="/internal", tags=["user-activity internal"])


@router.get(
    "/sessions/{anonymousId}/link",
    response_model=DeviceLink,
    dependencies=[scope_required(USER_ACTIVITY_INTERNAL)],
    responses=problems(400, 401, 403, 404, 503),
)
async def device_link(
    anonymous_id: Annotated[str, Path(alias="anonymousId", json_schema_extra={"format": "uuid"})],
    db: DatabaseDep,
) -> DeviceLink:
    """Which user the device is linked to now (for favorites)."""
    found = await history.device_link(db, device_id(anonymous_id, where="anonymousId"))
    return DeviceLink.model_validate(found)


# The manager route's endpoint, behind a service's scope instead of a user's permission.
router.add_api_route(
    "/users/{userId}/sessions",
    user_history,
    methods=["GET"],
    response_model=History,
    dependencies=[scope_required(USER_ACTIVITY_INTERNAL, ADMIN)],
    responses=problems(400, 401, 403, 422, 503),
    openapi_extra=parameters(*PAGE_PARAMETERS),
    description="A user's history for services (crm) and platform administrators.",
)

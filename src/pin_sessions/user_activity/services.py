"""User-activity's services, as the composition root builds them for the routes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends

from pin_sessions.platform.http.wiring import provided
from pin_sessions.user_activity.heartbeats import Heartbeats
from pin_sessions.user_activity.linking import StaleLinks
from pin_sessions.user_activity.user_data import ActivityData


@dataclass(frozen=True)
class UserActivityServices:
    """What user-activity's routes use beyond the platform's."""

    # The group-committed heartbeat writer; the heartbeat reads it from the request itself
    # (it is served ahead of the framework, without dependencies).
    heartbeats: Heartbeats
    stale_links: StaleLinks
    data: ActivityData


UserActivityDep = Annotated[UserActivityServices, Depends(provided(UserActivityServices))]

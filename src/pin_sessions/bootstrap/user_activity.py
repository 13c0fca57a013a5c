"""User-activity's services: the heartbeat writer and what its routes read."""

from __future__ import annotations

from pin_sessions.platform.runtime import Runtime
from pin_sessions.user_activity.heartbeats import Heartbeats
from pin_sessions.user_activity.linking import StaleLinks
from pin_sessions.user_activity.services import UserActivityServices
from pin_sessions.user_activity.user_data import ActivityData


def build_heartbeats(runtime: Runtime) -> Heartbeats:
    """The heartbeat writer: a device whose row is locked waits as for a pool connection,
    and such devices may hold at most half the pool, leaving the rest to everyone else."""
    options = runtime.settings.database
    return Heartbeats(
        runtime.database,
        runtime.registry,
        alone_limit=max(1, options.pool_max // 2),
        alone_wait=options.acquire_timeout,
        linger=runtime.settings.heartbeat.linger,
    )


def build_user_activity_services(runtime: Runtime) -> UserActivityServices:
    """What user-activity's routes use: the heartbeat writer, stale links, the user's data."""
    return UserActivityServices(
        heartbeats=build_heartbeats(runtime),
        stale_links=StaleLinks(runtime.registry),
        data=ActivityData(runtime.database),
    )

"""``GET /api/dev-stats/sessions/summary`` (SPEC §4)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query

from pin_sessions.dev_stats.domain import parse_period
from pin_sessions.dev_stats.operations import Summary, summarize
from pin_sessions.platform.auth import Authenticator
from pin_sessions.platform.clock import Clock
from pin_sessions.platform.database import Database

VIEW_PERMISSION = "dev-stats.view"


def build_router(database: Database, authenticator: Authenticator, clock: Clock) -> APIRouter:
    router = APIRouter(prefix="/api/dev-stats", tags=["dev-stats"])
    viewer = Depends(authenticator.user(permission=VIEW_PERMISSION))

    # Declared on the route, not as a parameter: a local Annotated alias cannot be resolved
    # by FastAPI under postponed annotations, and the principal itself is not needed here.
    @router.get("/sessions/summary", dependencies=[viewer])
    async def sessions_summary(
        # Plain strings, parsed by the domain, so a bad date is our 400 rather than a 422.
        from_: Annotated[str | None, Query(alias="from")] = None,
        to: Annotated[str | None, Query()] = None,
    ) -> dict[str, Any]:
        """Sessions that began between ``from`` and ``to`` (UTC days, both included)."""
        period = parse_period(from_, to, today=clock.now().date())
        return _render(await summarize(database, period))

    return router


def _render(summary: Summary) -> dict[str, Any]:
    return {
        "sessions": summary.sessions,
        "guestSessions": summary.guest_sessions,
        "userSessions": summary.user_sessions,
        "avgDurationSeconds": summary.avg_duration_seconds,
        "p50DurationSeconds": summary.p50_duration_seconds,
        "p90DurationSeconds": summary.p90_duration_seconds,
        "byDay": [
            {
                "date": day.day.isoformat(),
                "sessions": day.sessions,
                "guestSessions": day.guest_sessions,
                "userSessions": day.user_sessions,
                "avgDurationSeconds": day.avg_duration_seconds,
            }
            for day in summary.by_day
        ],
    }

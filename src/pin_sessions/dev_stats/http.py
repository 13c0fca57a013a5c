"""``GET /api/dev-stats/sessions/summary``: the session metrics dev-stats serves."""

from __future__ import annotations

from datetime import date
from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from pin_sessions.dev_stats.domain import parse_period
from pin_sessions.dev_stats.errors import SummaryPeriodInvalid
from pin_sessions.dev_stats.summary import Summary, summarize
from pin_sessions.platform.auth_errors import (
    AuthenticationRequired,
    MissingPermission,
    UserTokenRequired,
)
from pin_sessions.platform.http.dependencies import Now, ReadsDep, permission_required
from pin_sessions.platform.http.openapi import example, parameters, problems, query_parameter
from pin_sessions.platform.permissions import DEV_STATS_VIEW

# Read by hand and parsed by the domain, so a bad or out-of-range date is our 400
# DEV_STATS_PERIOD_INVALID rather than a 422; the document says what a good one is.
PERIOD_PARAMETERS = parameters(
    query_parameter(
        "from", {"type": "string", "format": "date"}, "First UTC day; 30 days before `to`"
    ),
    query_parameter("to", {"type": "string", "format": "date"}, "Last UTC day; today"),
)


class _Out(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)


DAY_EXAMPLE = {
    "date": "2026-12-06",
    "sessions": 42,
    "guestSessions": 30,
    "userSessions": 12,
    "avgDurationSeconds": 311.5,
}


class DayOut(_Out):
    """One UTC day's sessions (by the day they began)."""

    model_config = example(DAY_EXAMPLE)
    date: date
    sessions: int
    guest_sessions: int
    user_sessions: int
    avg_duration_seconds: float | None


class DurationBucketOut(_Out):
    """How many sessions lasted `fromSeconds` to `toSeconds`, both included."""

    model_config = example({"fromSeconds": 256, "toSeconds": 263, "sessions": 3})
    from_seconds: int
    to_seconds: int
    sessions: int


class SummaryOut(_Out):
    """Session metrics of a range of days; durations in seconds, null for an empty range."""

    model_config = example(
        {
            "sessions": 42,
            "guestSessions": 30,
            "userSessions": 12,
            "avgDurationSeconds": 311.5,
            "p50DurationSeconds": 240.0,
            "p90DurationSeconds": 702.0,
            "byDay": [DAY_EXAMPLE],
            "durationHistogram": [{"fromSeconds": 256, "toSeconds": 263, "sessions": 3}],
        }
    )
    sessions: int
    guest_sessions: int
    user_sessions: int
    avg_duration_seconds: float | None
    p50_duration_seconds: float | None
    p90_duration_seconds: float | None
    by_day: list[DayOut]
    # Beyond SPEC's fields: the histogram p50 and p90 are read from, so a client can draw
    # the real distribution (durations.py says how buckets are cut).
    duration_histogram: list[DurationBucketOut] = Field(
        description="Non-empty duration buckets, shortest first: whole seconds "
        "`fromSeconds` … `toSeconds`, both included (one bucket per second below 64 s, then "
        "32 per power of two)"
    )


router = APIRouter(prefix="/api/dev-stats", tags=["dev-stats"])


@router.get(
    "/sessions/summary",
    dependencies=[permission_required(DEV_STATS_VIEW)],
    operation_id="getSessionsSummary",
    summary="Session metrics over a range of days",
    responses=problems(
        400,
        401,
        403,
        503,
        SummaryPeriodInvalid,
        AuthenticationRequired,
        UserTokenRequired,
        MissingPermission,
    ),
    openapi_extra=PERIOD_PARAMETERS,
)
async def sessions_summary(
    reads: ReadsDep,
    now: Now,
    from_: Annotated[str | None, Query(alias="from", include_in_schema=False)] = None,
    to: Annotated[str | None, Query(include_in_schema=False)] = None,
) -> SummaryOut:
    """Counts and durations of the sessions that began between `from` and `to` (UTC days,
    both included; at most 366 days; by default the 30 days up to today): guest and
    signed-in sessions, average, median and 90th percentile duration, by day and as a
    duration histogram. For holders of the `dev-stats.view` permission.
    """
    period = parse_period(from_, to, today=now.date())
    return _render(await summarize(reads, period))


def _render(summary: Summary) -> SummaryOut:
    return SummaryOut(
        sessions=summary.sessions,
        guest_sessions=summary.guest_sessions,
        user_sessions=summary.user_sessions,
        avg_duration_seconds=summary.avg_duration_seconds,
        p50_duration_seconds=summary.p50_duration_seconds,
        p90_duration_seconds=summary.p90_duration_seconds,
        by_day=[
            DayOut(
                date=day.day,
                sessions=day.sessions,
                guest_sessions=day.guest_sessions,
                user_sessions=day.user_sessions,
                avg_duration_seconds=day.avg_duration_seconds,
            )
            for day in summary.by_day
        ],
        duration_histogram=[
            DurationBucketOut(
                from_seconds=bucket.first_second,
                to_seconds=bucket.last_second,
                sessions=bucket.sessions,
            )
            for bucket in summary.duration_buckets
        ],
    )

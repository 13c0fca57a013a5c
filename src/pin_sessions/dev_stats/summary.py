"""The summary of a period (``GET /api/dev-stats/sessions/summary``), from its days' rollups."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date

from pin_sessions.dev_stats import durations, repository
from pin_sessions.dev_stats.domain import Period
from pin_sessions.platform.reads import Reads


@dataclass(frozen=True)
class DaySummary:
    day: date
    sessions: int
    guest_sessions: int
    user_sessions: int
    avg_duration_seconds: float | None


@dataclass(frozen=True)
class DurationBucket:
    """Sessions whose duration lies in ``first_second`` … ``last_second`` (both included)."""

    first_second: int
    last_second: int
    sessions: int


@dataclass(frozen=True)
class Summary:
    """Counts and the average are exact; p50 and p90 as ``durations`` promises them."""

    sessions: int
    guest_sessions: int
    user_sessions: int
    avg_duration_seconds: float | None
    p50_duration_seconds: float | None
    p90_duration_seconds: float | None
    by_day: list[DaySummary]
    # The period's merged histogram, its non-empty buckets only, shortest first.
    duration_buckets: list[DurationBucket]


async def summarize(reads: Reads, period: Period) -> Summary:
    """Counts and durations of the sessions that began in ``period``, from its days' rollups.

    A summary tolerates lag (SPEC §11): it is read on the read replica when there is one.
    """
    rows = await reads.run(lambda conn: repository.days(conn, period.first, period.last))
    by_day = [
        DaySummary(
            day=row["day"],
            sessions=row["guest_sessions"] + row["user_sessions"],
            guest_sessions=row["guest_sessions"],
            user_sessions=row["user_sessions"],
            avg_duration_seconds=_average(
                row["duration_seconds_sum"], row["guest_sessions"] + row["user_sessions"]
            ),
        )
        for row in rows
    ]
    sessions = sum(day.sessions for day in by_day)
    histogram = durations.merge_stored([row["duration_histogram"] for row in rows], sessions)
    return Summary(
        sessions=sessions,
        guest_sessions=sum(day.guest_sessions for day in by_day),
        user_sessions=sum(day.user_sessions for day in by_day),
        avg_duration_seconds=_average(sum(row["duration_seconds_sum"] for row in rows), sessions),
        p50_duration_seconds=durations.percentile(histogram, 0.5),
        p90_duration_seconds=durations.percentile(histogram, 0.9),
        by_day=by_day,
        duration_buckets=[
            DurationBucket(*durations.bucket_bounds(bucket), count)
            for bucket, count in enumerate(histogram)
            if count
        ],
    )


def _average(total_seconds: int, sessions: int) -> float | None:
    return total_seconds / sessions if sessions else None

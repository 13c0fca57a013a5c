"""dev-stats use cases: record an ended session, summarise a period."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime

from pin_sessions.dev_stats.domain import Period, SessionFact
from pin_sessions.dev_stats.sql import INSERT_FACT, SELECT_BY_DAY, SELECT_TOTALS
from pin_sessions.platform.database import Connection, Database


async def record_session_ended(conn: Connection, fact: SessionFact, *, now: datetime) -> bool:
    """Keep the fact in the caller's transaction; False when the session was already counted."""
    status = await conn.execute(
        INSERT_FACT,
        fact.session_id,
        fact.message_id,
        fact.anonymous_id,
        fact.user_id,
        fact.created_at,
        fact.last_activity_at,
        fact.duration_seconds,
        now,
    )
    return bool(status == "INSERT 0 1")


@dataclass(frozen=True)
class DaySummary:
    day: date
    sessions: int
    guest_sessions: int
    user_sessions: int
    avg_duration_seconds: float | None


@dataclass(frozen=True)
class Summary:
    sessions: int
    guest_sessions: int
    user_sessions: int
    avg_duration_seconds: float | None
    p50_duration_seconds: float | None
    p90_duration_seconds: float | None
    by_day: list[DaySummary]


async def summarize(database: Database, period: Period) -> Summary:
    """Counts and durations of the sessions that began in ``period``."""
    async with database.transaction() as conn:
        totals = await conn.fetchrow(SELECT_TOTALS, period.first, period.last)
        days = await conn.fetch(SELECT_BY_DAY, period.first, period.last)
    assert totals is not None
    return Summary(
        sessions=totals["sessions"],
        guest_sessions=totals["guest_sessions"],
        user_sessions=totals["user_sessions"],
        avg_duration_seconds=totals["avg_duration"],
        p50_duration_seconds=totals["p50_duration"],
        p90_duration_seconds=totals["p90_duration"],
        by_day=[
            DaySummary(
                day=row["day"],
                sessions=row["sessions"],
                guest_sessions=row["guest_sessions"],
                user_sessions=row["user_sessions"],
                avg_duration_seconds=row["avg_duration"],
            )
            for row in days
        ],
    )

"""dev-stats facts and the summary period: rules only, no I/O."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import date, datetime, timedelta

from pin_sessions.dev_stats.errors import SummaryPeriodInvalid

DEFAULT_PERIOD_DAYS = 30
MAX_PERIOD_DAYS = 366
# SPEC §9: a date that reaches SQL lies in 2000-01-01 … today + 1 day. Outside it there are
# no sessions to count, and the driver turns date.min/date.max into ±infinity, which would
# make the by-day series endless.
EARLIEST_DAY = date(2000, 1, 1)
DAYS_AHEAD = timedelta(days=1)


@dataclass(frozen=True)
class SessionFact:
    """One ended session, as seed 004's payload describes it."""

    session_id: uuid.UUID
    message_id: uuid.UUID
    anonymous_id: uuid.UUID
    user_id: uuid.UUID | None
    created_at: datetime
    last_activity_at: datetime
    duration_seconds: int


@dataclass(frozen=True)
class Period:
    """Whole UTC days ``first``..``last``, both included; sessions count on the day they began."""

    first: date
    last: date

    @property
    def days(self) -> int:
        return (self.last - self.first).days + 1


def parse_period(raw_from: str | None, raw_to: str | None, *, today: date) -> Period:
    """``from``/``to`` as ``YYYY-MM-DD``; missing ``to`` is today, missing ``from`` 30 days back.

    Both days must lie in ``EARLIEST_DAY`` … ``today + DAYS_AHEAD``, checked before any
    arithmetic on them, so no input can overflow a date or reach SQL as ±infinity.
    """
    latest = today + DAYS_AHEAD
    last = _day("to", raw_to, latest=latest) if raw_to is not None else today
    first = (
        _day("from", raw_from, latest=latest)
        if raw_from is not None
        else max(last - timedelta(days=DEFAULT_PERIOD_DAYS - 1), EARLIEST_DAY)
    )
    if first > last:
        raise SummaryPeriodInvalid("'from' must not be after 'to'")
    period = Period(first, last)
    if period.days > MAX_PERIOD_DAYS:
        raise SummaryPeriodInvalid(f"the period may span at most {MAX_PERIOD_DAYS} days")
    return period


def _day(name: str, raw: str, *, latest: date) -> date:
    try:
        day = date.fromisoformat(raw)
    except ValueError:
        raise SummaryPeriodInvalid(f"'{name}' must be a date such as 2026-11-29") from None
    if not EARLIEST_DAY <= day <= latest:
        raise SummaryPeriodInvalid(
            f"'{name}' must lie between {EARLIEST_DAY.isoformat()} and {latest.isoformat()}"
        )
    return day

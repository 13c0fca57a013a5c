"""dev-stats facts and the summary period: rules only, no I/O."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import date, datetime, timedelta

from pin_sessions.dev_stats.errors import SummaryPeriodInvalid

DEFAULT_PERIOD_DAYS = 30
MAX_PERIOD_DAYS = 366


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
    """``from``/``to`` as ``YYYY-MM-DD``; missing ``to`` is today, missing ``from`` 30 days back."""
    last = _day("to", raw_to) if raw_to is not None else today
    first = (
        _day("from", raw_from)
        if raw_from is not None
        else last - timedelta(days=DEFAULT_PERIOD_DAYS - 1)
    )
    if first > last:
        raise SummaryPeriodInvalid("'from' must not be after 'to'")
    period = Period(first, last)
    if period.days > MAX_PERIOD_DAYS:
        raise SummaryPeriodInvalid(f"the period may span at most {MAX_PERIOD_DAYS} days")
    return period


def _day(name: str, raw: str) -> date:
    try:
        return date.fromisoformat(raw)
    except ValueError:
        raise SummaryPeriodInvalid(f"'{name}' must be a date such as 2026-11-29") from None

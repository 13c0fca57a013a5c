"""No date reaches SQL unchecked (SPEC §9): the summary's period is range-checked first.

Before the check, 0001-01-01 and 9999-12-31 reached asyncpg as ±infinity and made the
by-day series endless; a ``to`` of 0001-01-01 overflowed into a 500.
"""

from __future__ import annotations

from datetime import date

import httpx
import pytest

from pin_sessions.bootstrap.identity import build_token_signer
from pin_sessions.dev_stats.domain import parse_period
from pin_sessions.dev_stats.errors import SummaryPeriodInvalid
from pin_sessions.platform.runtime import Runtime
from tests.conftest import T0
from tests.support.users import signed_in_user

URL = "/api/dev-stats/sessions/summary"
TODAY = T0.date()


@pytest.mark.parametrize(
    "period",
    [
        {"from": "0001-01-01", "to": "0001-01-01"},
        {"from": "9999-12-30", "to": "9999-12-31"},
        {"to": "0001-01-01"},
        {"from": "0001-01-01"},
        {"to": "9999-12-31"},
        {"from": "1999-12-31", "to": "2000-01-01"},
        {"from": "2026-11-30", "to": "2026-12-01"},  # to is today + 2 days
        {"from": "2025-11-28", "to": "2026-11-29"},  # 367 days
    ],
)
async def test_a_period_outside_the_allowed_range_is_a_400_problem(
    runtime: Runtime, http: httpx.AsyncClient, period: dict[str, str]
) -> None:
    async with runtime.database.transaction() as conn:
        viewer = await signed_in_user(
            conn, build_token_signer(runtime), now=T0, permissions=["dev-stats.view"]
        )

    response = await http.get(URL, params=period, headers=viewer.headers)

    assert response.status_code == 400, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["code"] == "DEV_STATS_PERIOD_INVALID"


def test_the_widest_allowed_periods_are_accepted() -> None:
    assert parse_period("2000-01-01", "2000-12-31", today=TODAY).days == 366
    tomorrow = parse_period("2026-11-30", "2026-11-30", today=TODAY)
    assert (tomorrow.first, tomorrow.last) == (date(2026, 11, 30), date(2026, 11, 30))


def test_the_default_period_never_starts_before_the_earliest_day() -> None:
    period = parse_period(None, "2000-01-10", today=TODAY)
    assert (period.first, period.last) == (date(2000, 1, 1), date(2000, 1, 10))


@pytest.mark.parametrize("raw", ["2000-01-01", "2026-11-30"])
def test_each_bound_itself_is_inside(raw: str) -> None:
    assert parse_period(raw, raw, today=TODAY).days == 1


def test_the_day_after_tomorrow_is_outside() -> None:
    with pytest.raises(SummaryPeriodInvalid):
        parse_period("2026-12-01", "2026-12-01", today=TODAY)

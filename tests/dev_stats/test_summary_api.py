"""GET /api/dev-stats/sessions/summary over real HTTP (SPEC §4)."""

from __future__ import annotations

import uuid
from datetime import timedelta

import httpx
import pytest

from pin_sessions.bootstrap.identity import build_token_signer
from pin_sessions.dev_stats.domain import SessionFact
from pin_sessions.dev_stats.durations import MAX_RELATIVE_ERROR
from pin_sessions.dev_stats.recording import record_session_ended
from pin_sessions.platform.runtime import Runtime
from tests.conftest import T0
from tests.support.users import SignedInUser, signed_in_user

URL = "/api/dev-stats/sessions/summary"


async def _viewer(runtime: Runtime, *permissions: str) -> SignedInUser:
    async with runtime.database.transaction() as conn:
        return await signed_in_user(
            conn, build_token_signer(runtime), now=T0, permissions=permissions
        )


async def _ended(runtime: Runtime, *, day: int, seconds: int, user: bool) -> None:
    started = T0 + timedelta(days=day)
    fact = SessionFact(
        session_id=uuid.uuid4(),
        message_id=uuid.uuid4(),
        anonymous_id=uuid.uuid4(),
        user_id=uuid.uuid4() if user else None,
        created_at=started,
        last_activity_at=started + timedelta(seconds=seconds),
        duration_seconds=seconds,
    )
    async with runtime.database.transaction() as conn:
        await record_session_ended(conn, fact, now=T0)


async def test_the_summary_counts_sessions_by_kind_with_durations_and_days(
    runtime: Runtime, http: httpx.AsyncClient
) -> None:
    viewer = await _viewer(runtime, "dev-stats.view")
    await _ended(runtime, day=0, seconds=60, user=False)
    await _ended(runtime, day=0, seconds=120, user=True)
    await _ended(runtime, day=1, seconds=300, user=False)
    await _ended(runtime, day=3, seconds=999, user=True)  # after the period

    response = await http.get(
        URL, params={"from": "2026-11-29", "to": "2026-11-30"}, headers=viewer.headers
    )

    assert response.status_code == 200
    body = response.json()
    # Exact percentile_cont: 120 and 264; the histogram's promise is 1/65 of them.
    assert body.pop("p50DurationSeconds") == pytest.approx(120.0, rel=MAX_RELATIVE_ERROR)
    assert body.pop("p90DurationSeconds") == pytest.approx(264.0, rel=MAX_RELATIVE_ERROR)
    assert body == {
        "sessions": 3,
        "guestSessions": 2,
        "userSessions": 1,
        "avgDurationSeconds": 160.0,
        "byDay": [
            {
                "date": "2026-11-29",
                "sessions": 2,
                "guestSessions": 1,
                "userSessions": 1,
                "avgDurationSeconds": 90.0,
            },
            {
                "date": "2026-11-30",
                "sessions": 1,
                "guestSessions": 1,
                "userSessions": 0,
                "avgDurationSeconds": 300.0,
            },
        ],
        # Beyond SPEC's fields, for the dashboard: the period's non-empty buckets.
        "durationHistogram": [
            {"fromSeconds": 60, "toSeconds": 60, "sessions": 1},
            {"fromSeconds": 120, "toSeconds": 121, "sessions": 1},
            {"fromSeconds": 296, "toSeconds": 303, "sessions": 1},
        ],
    }


async def test_an_empty_period_has_zero_sessions_and_no_durations(
    runtime: Runtime, http: httpx.AsyncClient
) -> None:
    viewer = await _viewer(runtime, "dev-stats.view")
    response = await http.get(URL, params={"from": "2026-11-29"}, headers=viewer.headers)
    assert response.status_code == 200
    body = response.json()
    assert (body["sessions"], body["avgDurationSeconds"], body["p90DurationSeconds"]) == (
        0,
        None,
        None,
    )
    assert [day["date"] for day in body["byDay"]] == ["2026-11-29"]  # `to` defaults to today
    assert body["durationHistogram"] == []


async def test_a_bad_period_is_a_400_problem(runtime: Runtime, http: httpx.AsyncClient) -> None:
    viewer = await _viewer(runtime, "dev-stats.view")
    for params in (
        {"from": "yesterday"},
        {"from": "2026-11-30", "to": "2026-11-29"},
        {"from": "2020-01-01", "to": "2026-11-29"},
    ):
        response = await http.get(URL, params=params, headers=viewer.headers)
        assert response.status_code == 400, params
        assert response.headers["content-type"] == "application/problem+json"
        assert response.json()["code"] == "DEV_STATS_PERIOD_INVALID"


async def test_the_summary_needs_a_user_with_the_dev_stats_view_permission(
    runtime: Runtime, http: httpx.AsyncClient
) -> None:
    assert (await http.get(URL)).status_code == 401
    plain = await _viewer(runtime)
    assert (await http.get(URL, headers=plain.headers)).status_code == 403

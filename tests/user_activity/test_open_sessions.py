"""``GET /api/user-activity/sessions/open-count``: the dashboard's "open right now"."""

from __future__ import annotations

import uuid
from datetime import timedelta

import httpx

from pin_sessions.platform.ids import new_id
from pin_sessions.platform.runtime import Runtime
from pin_sessions.user_activity.closing import close_sessions
from tests.conftest import T0
from tests.user_activity.conftest import UserFactory, device

START = "/api/user-activity/sessions/start"
OPEN = "/api/user-activity/sessions/open-count"
CRAWLER = "Googlebot/2.1 (+http://www.google.com/bot.html)"


async def test_open_sessions_count_every_active_session_a_bots_too_and_no_closed_one(
    http: httpx.AsyncClient, runtime: Runtime, new_user: UserFactory
) -> None:
    for _ in range(2):
        assert (await http.post(START, headers=device(new_id()))).status_code == 200
    bot = {"X-Anonymous-Id": str(new_id()), "User-Agent": CRAWLER}
    assert (await http.post(START, headers=bot)).status_code == 200
    closed = (await http.post(START, headers=device(new_id()))).json()["sessionId"]
    async with runtime.database.transaction() as conn:
        await close_sessions(conn, [uuid.UUID(closed)], now=T0 + timedelta(minutes=1))

    viewer = await new_user(["dev-stats.view"])
    response = await http.get(OPEN, headers=viewer.headers)

    assert response.status_code == 200
    # Two people's and the crawler's: dev-stats counts every session once it ends.
    assert response.json() == {"openSessions": 3, "countedAt": "2026-11-29T12:00:00Z"}


async def test_open_sessions_need_the_dev_stats_permission(
    http: httpx.AsyncClient, new_user: UserFactory
) -> None:
    assert (await http.get(OPEN)).status_code == 401
    someone = await new_user()
    forbidden = await http.get(OPEN, headers=someone.headers)
    assert forbidden.status_code == 403

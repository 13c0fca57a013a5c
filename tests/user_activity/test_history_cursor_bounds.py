"""A history cursor's time is range-checked before it reaches SQL (SPEC §9).

A cursor travels through the client; one carrying a time near datetime.min or .max in a
far offset overflowed the driver's conversion to UTC: a 500.
"""

from __future__ import annotations

import base64

import httpx
import pytest

from pin_sessions.platform.ids import new_id
from tests.user_activity.conftest import device

OWN = "/api/user-activity/sessions"


def _cursor(created_at: str) -> str:
    text = f"{created_at}|{new_id()}"
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


@pytest.mark.parametrize(
    "created_at",
    [
        "0001-01-01T00:00:00+14:00",
        "9999-12-31T23:59:59-14:00",
        "1999-12-31T23:59:59+00:00",
        "2026-12-01T00:00:01+00:00",  # more than a day after the test clock's now
    ],
)
async def test_a_cursor_time_out_of_range_is_a_400(
    http: httpx.AsyncClient, created_at: str
) -> None:
    response = await http.get(OWN, params={"cursor": _cursor(created_at)}, headers=device(new_id()))

    assert response.status_code == 400, response.text
    assert response.json()["code"] == "USER_ACTIVITY_CURSOR_INVALID"


async def test_a_cursor_time_within_range_is_accepted(http: httpx.AsyncClient) -> None:
    response = await http.get(
        OWN, params={"cursor": _cursor("2026-11-29T12:00:00+00:00")}, headers=device(new_id())
    )

    assert response.status_code == 200, response.text
    assert response.json() == {"items": [], "nextCursor": None}

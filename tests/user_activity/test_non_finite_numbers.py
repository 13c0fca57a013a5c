"""Non-finite numbers are bad input (SPEC §9): NaN, the infinities and 1e400 in action data.

Python's JSON reader takes them; JSON and jsonb do not. They were a 500 that dropped the
keep-alive connection, logged twice, and made PostgreSQL log the client's JSON.
"""

from __future__ import annotations

import json
import uuid

import pytest

from pin_sessions.platform.runtime import Runtime
from tests.conftest import LogCapture
from tests.support.raw_http import RawConnection

ACTIONS = "/api/user-activity/actions"


@pytest.mark.parametrize(
    "data",
    ["NaN", "Infinity", "-Infinity", "1e400", '{"price": [1, 2, -1e999]}', '{"a": {"b": NaN}}'],
)
async def test_a_non_finite_number_is_a_422_that_reaches_no_table_and_keeps_the_connection(
    runtime: Runtime, api_url: str, captured_logs: LogCapture, data: str
) -> None:
    device = str(uuid.uuid4())
    connection = await RawConnection.open(api_url)
    try:
        refused = await connection.request(
            "POST",
            ACTIONS,
            body=f'{{"type": "viewed", "data": {data}}}'.encode(),
            headers={"Content-Type": "application/json", "X-Anonymous-Id": device},
        )
        # The same connection serves the next request: nothing reset it.
        after = await connection.request("GET", "/healthz")
    finally:
        await connection.close()

    assert refused.status == 422
    assert refused.headers["content-type"] == "application/problem+json"
    assert refused.json()["code"] == "VALIDATION_ERROR"
    assert after.status == 200
    async with runtime.database.connection() as conn:
        sessions = await conn.fetchval(
            "select count(*) from user_activity.sessions where anonymous_id = $1",
            uuid.UUID(device),
        )
        actions = await conn.fetchval("select count(*) from user_activity.action_events")
    assert (sessions, actions) == (0, 0)
    request_id = refused.headers["x-request-id"]
    lines = [json.loads(line) for line in captured_logs.lines()]
    mine = [line for line in lines if line.get("requestId") == request_id]
    assert [(line["event"], line["status"]) for line in mine] == [("http request", 422)]

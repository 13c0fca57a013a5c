"""HTTP details a client can get wrong, each answered plainly: a second ``Content-Type`` is a
400 that records nothing (which body would it describe?), and a method a literal path does
not serve is that path's 405 with its ``Allow``, never a match of a parameterised sibling."""

from __future__ import annotations

import httpx

from pin_sessions.platform.ids import new_id
from pin_sessions.platform.runtime import Runtime

ACTIONS = "/api/user-activity/actions"


async def _actions(runtime: Runtime) -> int:
    async with runtime.database.connection() as conn:
        count: int = await conn.fetchval("select count(*) from user_activity.action_events")
    return count


async def test_two_content_types_are_a_400_and_record_nothing(
    http: httpx.AsyncClient, runtime: Runtime
) -> None:
    headers = [
        ("X-Anonymous-Id", str(new_id())),
        ("Content-Type", "application/json"),
        ("Content-Type", "text/plain"),
    ]
    refused = await http.post(ACTIONS, headers=headers, content=b'{"type": "search"}')
    assert refused.status_code == 400
    assert (refused.json()["code"], refused.json()["header"]) == (
        "DUPLICATE_HEADER",
        "Content-Type",
    )
    assert await _actions(runtime) == 0
    one = [headers[0], headers[1]]
    assert (await http.post(ACTIONS, headers=one, content=b'{"type": "search"}')).status_code == 201


async def test_a_literal_path_answers_its_own_405_not_a_parameterised_siblings(
    http: httpx.AsyncClient,
) -> None:
    for literal in ("/api/identity/sessions/logout", "/api/identity/sessions/refresh"):
        answer = await http.delete(literal)
        assert answer.status_code == 405, (literal, answer.text)
        assert answer.headers["allow"] == "POST"
        assert answer.json()["code"] == "METHOD_NOT_ALLOWED"
    # The parameterised route still serves a session id (no token here: 401).
    assert (await http.delete(f"/api/identity/sessions/{new_id()}")).status_code == 401

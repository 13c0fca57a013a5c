"""History pages and the whole authorization matrix of the user-activity routes."""

from __future__ import annotations

import uuid
from datetime import timedelta

import httpx
import pytest

from pin_sessions.platform.clock import FixedClock
from pin_sessions.platform.ids import new_id
from pin_sessions.platform.runtime import Runtime
from pin_sessions.user_activity.closing import close_sessions
from tests.conftest import T0
from tests.support.tokens import Tokens
from tests.user_activity.conftest import UserFactory, device

START = "/api/user-activity/sessions/start"
LINK = "/api/user-activity/sessions/link"
OWN = "/api/user-activity/sessions"
ACTIONS = "/api/user-activity/actions"
PERMISSION = "user-activity.history.view-by-user"


async def _guest_sessions(
    http: httpx.AsyncClient,
    runtime: Runtime,
    clock: FixedClock,
    anonymous_id: uuid.UUID,
    count: int,
) -> list[str]:
    """``count`` closed-then-restarted sessions of one device, oldest first."""
    ids = []
    for _ in range(count):
        body = (await http.post(START, headers=device(anonymous_id))).json()
        ids.append(body["sessionId"])
        async with runtime.database.transaction() as conn:
            await close_sessions(conn, [uuid.UUID(body["sessionId"])], now=clock.now())
        clock.advance(timedelta(minutes=1))
    return ids


async def test_a_guest_pages_through_its_devices_sessions_newest_first(
    http: httpx.AsyncClient, runtime: Runtime, clock: FixedClock
) -> None:
    anonymous_id = new_id()
    ids = await _guest_sessions(http, runtime, clock, anonymous_id, 5)
    seen: list[str] = []
    cursor = None
    for _ in range(len(ids)):  # a page of two at least: more pages than this is a loop
        params = {"limit": 2} | ({"cursor": cursor} if cursor else {})
        page = (await http.get(OWN, params=params, headers=device(anonymous_id))).json()
        seen.extend(item["sessionId"] for item in page["items"])
        cursor = page["nextCursor"]
        if cursor is None:
            break
    assert cursor is None, "the pages never ended"
    assert seen == list(reversed(ids))
    item = page["items"][0]
    assert item["device"] == {"type": "Mobile", "os": "iOS 18", "browser": "Mobile Safari 18"}
    assert item["status"] == "Inactive"
    assert item["durationSeconds"] == 0


async def test_a_bad_cursor_is_refused(http: httpx.AsyncClient) -> None:
    response = await http.get(OWN, params={"cursor": "@@@"}, headers=device(new_id()))
    assert response.status_code == 400
    assert response.json()["code"] == "USER_ACTIVITY_CURSOR_INVALID"


@pytest.mark.parametrize("limit", ["0", "101", "-1", "ten", "2.5", "\u0661"])
async def test_a_bad_page_size_is_refused_like_a_bad_cursor(
    http: httpx.AsyncClient, limit: str
) -> None:
    response = await http.get(OWN, params={"limit": limit}, headers=device(new_id()))
    assert response.status_code == 400
    assert response.json()["code"] == "USER_ACTIVITY_LIMIT_INVALID"


async def test_page_sizes_from_1_to_100_are_accepted(http: httpx.AsyncClient) -> None:
    anonymous_id = new_id()
    await http.post(START, headers=device(anonymous_id))
    for limit in ("1", "100"):
        response = await http.get(OWN, params={"limit": limit}, headers=device(anonymous_id))
        assert response.status_code == 200
        assert len(response.json()["items"]) == 1


async def test_a_users_history_joins_activity_before_and_after_sign_in(
    http: httpx.AsyncClient, new_user: UserFactory, clock: FixedClock
) -> None:
    anonymous_id = new_id()
    user = await new_user()
    await http.post(ACTIONS, headers=device(anonymous_id), json={"type": "before"})
    clock.advance(timedelta(seconds=1))
    await http.post(LINK, headers=device(anonymous_id, user))
    await http.post(ACTIONS, headers=device(anonymous_id), json={"type": "after"})
    page = (await http.get(OWN, headers=user.headers)).json()
    [item] = page["items"]
    assert item["userId"] == str(user.user_id)
    assert [(action["type"], action["userId"]) for action in item["actions"]] == [
        ("before", None),
        ("after", str(user.user_id)),
    ]
    # Once linked, the session is the user's: the bare device no longer lists it.
    guest = (await http.get(OWN, headers=device(anonymous_id))).json()
    assert guest["items"] == []


async def test_another_devices_or_users_sessions_are_never_visible(
    http: httpx.AsyncClient, new_user: UserFactory
) -> None:
    mine, theirs = new_id(), new_id()
    await http.post(START, headers=device(mine))
    await http.post(START, headers=device(theirs))
    guest = (await http.get(OWN, headers=device(mine))).json()
    assert {item["anonymousId"] for item in guest["items"]} == {str(mine)}
    alice, bob = await new_user(), await new_user()
    await http.post(LINK, headers=device(new_id(), alice))
    await http.post(LINK, headers=device(new_id(), bob))
    for user in (alice, bob):
        # A user's own history is chosen by the token alone, whatever device header comes along.
        page = (await http.get(OWN, headers=device(theirs, user))).json()
        assert {item["userId"] for item in page["items"]} == {str(user.user_id)}


async def test_history_never_shows_an_ip_address(
    http: httpx.AsyncClient, new_user: UserFactory
) -> None:
    user = await new_user(permissions=[PERMISSION])
    await http.post(LINK, headers=device(new_id(), user))
    for path in (OWN, f"/api/user-activity/users/{user.user_id}/sessions"):
        response = await http.get(path, headers=user.headers)
        assert response.status_code == 200
        assert "127.0.0.1" not in response.text
        assert "userAgent" not in response.text


async def test_the_manager_route_needs_the_permission(
    http: httpx.AsyncClient, new_user: UserFactory, tokens: Tokens
) -> None:
    subject = await new_user()
    await http.post(LINK, headers=device(new_id(), subject))
    path = f"/api/user-activity/users/{subject.user_id}/sessions"
    assert (await http.get(path)).status_code == 401
    plain = await new_user()
    denied = await http.get(path, headers=plain.headers)
    assert (denied.status_code, denied.json()["code"]) == (403, "AUTH_MISSING_PERMISSION")
    machine = await tokens.m2m("crm", ["user-activity.internal"], now=T0)
    assert (await http.get(path, headers=_bearer(machine))).status_code == 401
    manager = await new_user(permissions=[PERMISSION])
    allowed = await http.get(path, headers=manager.headers)
    assert allowed.status_code == 200
    assert [item["userId"] for item in allowed.json()["items"]] == [str(subject.user_id)]


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.mark.parametrize("scope", ["user-activity.internal", "admin"])
async def test_internal_user_history_accepts_its_scopes(
    http: httpx.AsyncClient, new_user: UserFactory, tokens: Tokens, scope: str
) -> None:
    subject = await new_user()
    await http.post(LINK, headers=device(new_id(), subject))
    token = await tokens.m2m("svc", [scope], now=T0)
    response = await http.get(f"/internal/users/{subject.user_id}/sessions", headers=_bearer(token))
    assert response.status_code == 200
    assert len(response.json()["items"]) == 1


async def test_internal_routes_refuse_everyone_else(
    http: httpx.AsyncClient, new_user: UserFactory, tokens: Tokens
) -> None:
    user = await new_user(permissions=[PERMISSION])
    wrong_scope = _bearer(await tokens.m2m("svc", ["dev-stats.read"], now=T0))
    admin_only = _bearer(await tokens.m2m("svc", ["admin"], now=T0))
    link_path = f"/internal/sessions/{new_id()}/link"
    users_path = f"/internal/users/{user.user_id}/sessions"
    for path in (link_path, users_path):
        assert (await http.get(path)).status_code == 401
        assert (await http.get(path, headers=user.headers)).status_code == 403
        assert (await http.get(path, headers=wrong_scope)).status_code == 403
    # `admin` opens the users route only; the link route is for services.
    assert (await http.get(link_path, headers=admin_only)).status_code == 403


async def test_the_internal_link_route_reports_the_devices_current_link(
    http: httpx.AsyncClient, new_user: UserFactory, tokens: Tokens
) -> None:
    token = _bearer(await tokens.m2m("favorites", ["user-activity.internal"], now=T0))
    anonymous_id = new_id()
    assert (
        await http.get(f"/internal/sessions/{anonymous_id}/link", headers=token)
    ).status_code == 404
    await http.post(START, headers=device(anonymous_id))
    unlinked = (await http.get(f"/internal/sessions/{anonymous_id}/link", headers=token)).json()
    assert unlinked == {"anonymousId": str(anonymous_id), "userId": None, "linkedAt": None}
    user = await new_user()
    await http.post(LINK, headers=device(anonymous_id, user))
    linked = (await http.get(f"/internal/sessions/{anonymous_id}/link", headers=token)).json()
    assert linked == {
        "anonymousId": str(anonymous_id),
        "userId": str(user.user_id),
        "linkedAt": "2026-11-29T12:00:00Z",
    }
    malformed = await http.get("/internal/sessions/nope/link", headers=token)
    assert malformed.json()["code"] == "USER_ACTIVITY_ANONYMOUS_ID_INVALID"
    # The path's name, not a header's.
    assert malformed.json()["detail"] == "anonymousId must be a UUID other than the nil UUID"


async def test_own_history_without_any_credentials_is_401(http: httpx.AsyncClient) -> None:
    assert (await http.get(OWN)).status_code == 401


async def test_user_routes_refuse_an_m2m_token_as_unauthenticated(
    http: httpx.AsyncClient, tokens: Tokens
) -> None:
    token = _bearer(await tokens.m2m("svc", ["user-activity.internal", "admin"], now=T0))
    headers = token | {"X-Anonymous-Id": str(new_id())}
    for method, path in [("POST", START), ("POST", LINK), ("GET", OWN), ("POST", ACTIONS)]:
        response = await http.request(method, path, headers=headers, json={"type": "ok"})
        assert (response.status_code, response.json()["code"]) == (
            401,
            "AUTH_USER_TOKEN_REQUIRED",
        ), path


async def test_an_invalid_bearer_token_is_401_even_for_guest_routes(
    http: httpx.AsyncClient,
) -> None:
    headers = {"Authorization": "Bearer nonsense", "X-Anonymous-Id": str(new_id())}
    assert (await http.post(START, headers=headers)).status_code == 401
    assert (await http.get(OWN, headers=headers)).status_code == 401

"""The tracker in real Chromium against the live API: one session per device, heartbeats
only from a visible tab in use, linking on sign-in (the latest sign-in owning the device),
and the offline queue.

The demo's screenshot is kept as a test artefact in its test's ``tmp_path`` (under pytest's
``--basetemp``)."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
from playwright.async_api import BrowserContext, Page

from pin_sessions.platform.clock import FixedClock
from tests.web.pages import (
    ACTIONS_PATH,
    HEARTBEAT_PATH,
    Traffic,
    interact,
    open_demo,
    set_hidden,
    tracker,
    wait_for_ticks,
)

SESSIONS = "/api/user-activity/sessions"
FAST = "?heartbeatMs=100&interactionMs=600000"


async def device_history(http: httpx.AsyncClient, anonymous_id: str) -> list[dict[str, object]]:
    response = await http.get(SESSIONS, headers={"X-Anonymous-Id": anonymous_id})
    assert response.status_code == 200, response.text
    items: list[dict[str, object]] = response.json()["items"]
    return items


async def test_tabs_of_one_device_share_one_anonymous_id_and_one_session(
    device: BrowserContext, http: httpx.AsyncClient
) -> None:
    tabs = [await device.new_page() for _ in range(3)]
    # All tabs load at once, before any has an AnonymousId: the race the tracker's
    # cross-tab lock is there for.
    states = await asyncio.gather(*(open_demo(tab) for tab in tabs))

    assert len({state["anonymousId"] for state in states}) == 1
    assert len({state["sessionId"] for state in states}) == 1
    one = states[0]
    stored = await tabs[0].evaluate("() => localStorage.getItem('pin.anonymousId')")
    assert stored == one["anonymousId"]
    [session] = await device_history(http, one["anonymousId"])
    assert session["sessionId"] == one["sessionId"]


async def test_an_unused_tab_sends_no_heartbeats_and_stops_a_window_after_last_use(
    device: BrowserContext,
) -> None:
    page = await device.new_page()
    await open_demo(page, "?heartbeatMs=100&interactionMs=400")

    await wait_for_ticks(page, 5)
    assert (await tracker(page))["heartbeats"] == 0  # visible, never touched

    await interact(page)
    await page.wait_for_function("() => window.pinTracker.stats.heartbeats >= 1")
    # Ten ticks of 100 ms outlast the 400 ms interaction window.
    await wait_for_ticks(page, 10)
    settled = (await tracker(page))["heartbeats"]
    await wait_for_ticks(page, 5)
    assert (await tracker(page))["heartbeats"] == settled


async def test_a_hidden_tab_sends_no_heartbeats_even_while_used(device: BrowserContext) -> None:
    page = await device.new_page()
    traffic = Traffic().watch(page)
    await open_demo(page, FAST)

    # Visible and used: heartbeats flow (the control that shows the test can fail).
    await interact(page)
    await page.wait_for_function("() => window.pinTracker.stats.heartbeats >= 2")

    await interact(page)
    await set_hidden(page, True)
    at_hiding = (await tracker(page))["heartbeats"]
    await traffic.wait_accepted(HEARTBEAT_PATH, at_hiding)
    for _ in range(3):
        await interact(page)
        await wait_for_ticks(page, 4)
    hidden = await tracker(page)
    assert hidden["heartbeats"] == at_hiding
    assert hidden["finalHeartbeats"] <= 1
    assert traffic.sent(HEARTBEAT_PATH) == at_hiding

    # Back in front and used again: heartbeats resume.
    await set_hidden(page, False)
    await interact(page)
    await page.wait_for_function(
        "count => window.pinTracker.stats.heartbeats > count", arg=at_hiding
    )


async def test_hiding_a_used_tab_sends_one_final_heartbeat(device: BrowserContext) -> None:
    page = await device.new_page()
    traffic = Traffic().watch(page)
    await open_demo(page)  # the real 60 s interval: no timer heartbeat during this test
    await interact(page)

    await set_hidden(page, True)
    await set_hidden(page, False)
    await set_hidden(page, True)  # hidden again without new use: nothing more to report

    await page.wait_for_function("() => window.pinTracker.stats.heartbeats === 1")
    state = await tracker(page)
    assert state["finalHeartbeats"] == 1
    await traffic.wait_accepted(HEARTBEAT_PATH, 1)
    assert traffic.sent(HEARTBEAT_PATH) == 1


async def test_signing_in_on_the_demo_links_the_device_session_to_the_user(
    device: BrowserContext, http: httpx.AsyncClient, tmp_path: Path
) -> None:
    page = await device.new_page()
    guest = await open_demo(page)
    assert guest["userId"] is None
    # Something done as a guest, before signing in.
    await page.click("button[data-favourite]")
    await page.wait_for_function("() => window.pinTracker.stats.delivered >= 2")

    await page.fill("#phone", "+15550100777")
    await page.click("#sign-in")
    await page.wait_for_function("() => window.pinTracker.userId")

    linked = await tracker(page)
    # A test artefact, kept under pytest's --basetemp: what a developer sees on the demo.
    await page.screenshot(path=tmp_path / "demo.png", full_page=True)
    assert linked["sessionId"] == guest["sessionId"]
    tokens = json.loads(
        await page.evaluate("() => sessionStorage.getItem('pin.demo.tokens')") or "null"
    )
    assert linked["userId"] == tokens["userId"]
    mine = await http.get(SESSIONS, headers={"Authorization": f"Bearer {tokens['accessToken']}"})
    assert mine.status_code == 200, mine.text
    [session] = mine.json()["items"]
    assert session["sessionId"] == guest["sessionId"]
    assert session["userId"] == tokens["userId"]
    # The guest's action is part of the user's history now, through the session.
    assert [action["type"] for action in session["actions"]] == ["favourite-added"]


async def _sign_in_on(page: Page, phone: str) -> dict[str, Any]:
    """Sign in on the demo page; the tracker links the device. The tab's token pair."""
    await page.fill("#phone", phone)
    await page.click("#sign-in")
    await page.wait_for_function(
        "() => document.getElementById('status').textContent.startsWith('Signed in')"
    )
    tokens: dict[str, Any] = json.loads(
        await page.evaluate("() => sessionStorage.getItem('pin.demo.tokens')") or "null"
    )
    return tokens


async def test_a_later_sign_in_in_another_tab_keeps_the_device_whatever_the_first_tab_sends(
    device: BrowserContext, http: httpx.AsyncClient, clock: FixedClock
) -> None:
    """SPEC §11: one browser, two tabs, two users (each tab keeps its own tokens). B signs in
    after A: the tracker's link of B's fresh sign-in wins, and A's tab — its link sent
    again, its token still valid — never takes the device back."""
    first_tab, second_tab = await device.new_page(), await device.new_page()
    # Both open before any sign-in: a tab opened after one would start signed in as A.
    await open_demo(first_tab)
    await open_demo(second_tab)
    a = await _sign_in_on(first_tab, "+15550100701")
    assert (await tracker(first_tab))["userId"] == a["userId"]

    clock.advance(timedelta(minutes=1))
    b = await _sign_in_on(second_tab, "+15550100702")
    b_linked = await tracker(second_tab)
    assert b_linked["userId"] == b["userId"]

    # The first tab links A again (a queued link retried, a reload): stale, a 200 all the
    # same, and the tracker learns whose the device's session is.
    again = await first_tab.evaluate("token => window.pinTracker.link(token)", a["accessToken"])
    assert again == {
        "sessionId": b_linked["sessionId"],
        "userId": b["userId"],
        "linkedAt": again["linkedAt"],
        "switched": False,
        "stale": True,
    }
    # And what the first tab tracks still lands in the device's session, B's.
    await first_tab.click("button[data-favourite]")
    await first_tab.wait_for_function("() => window.pinTracker.pending === 0")

    mine = await http.get(SESSIONS, headers={"Authorization": f"Bearer {b['accessToken']}"})
    [session] = mine.json()["items"]
    assert (session["sessionId"], session["status"]) == (b_linked["sessionId"], "Active")
    assert [action["type"] for action in session["actions"]] == ["favourite-added"]
    theirs = await http.get(SESSIONS, headers={"Authorization": f"Bearer {a['accessToken']}"})
    assert [item["status"] for item in theirs.json()["items"]] == ["Inactive"]


async def test_an_empty_phone_sends_no_code_and_a_second_tab_shows_the_sign_in(
    device: BrowserContext,
) -> None:
    page = await device.new_page()
    sign_ins: list[str] = []
    page.on("request", lambda r: sign_ins.append(r.url) if "/sign-in/" in r.url else None)
    await open_demo(page)
    await page.click("#send-code")  # the phone field left empty
    await page.wait_for_function(
        "() => document.getElementById('status').textContent.startsWith('Type your phone')"
    )
    assert sign_ins == []  # it used to send a code to a number the page made up

    tokens = await _sign_in_on(page, "+15550100703")
    second = await device.new_page()
    await open_demo(second)
    await second.wait_for_function(
        "() => document.getElementById('signed-in-as').textContent.includes('linked to you')"
    )
    signed_in = await second.text_content("#signed-in-as")
    assert signed_in is not None and signed_in.startswith(f"Signed in as user {tokens['userId']}")
    assert await second.locator("#sign-in-forms").is_hidden()
    assert await second.locator("#sign-out").is_visible()


async def test_actions_taken_offline_are_delivered_once_when_back_online(
    device: BrowserContext, http: httpx.AsyncClient
) -> None:
    page = await device.new_page()
    traffic = Traffic().watch(page)
    started = await open_demo(page, "?retryMs=50&retryMaxMs=200")

    await device.set_offline(True)
    for button in await page.query_selector_all("button[data-favourite]"):
        await button.click()
    await page.wait_for_function("() => window.pinTracker.pending === 3")
    assert traffic.sent(ACTIONS_PATH) == 0

    await device.set_offline(False)
    await page.wait_for_function("() => window.pinTracker.pending === 0")
    # One more flush must find nothing left to send.
    await page.evaluate("() => window.pinTracker.flush()")
    await traffic.wait_accepted(ACTIONS_PATH, 3)

    assert traffic.accepted(ACTIONS_PATH) == 3
    assert traffic.sent(ACTIONS_PATH) == 3
    [session] = await device_history(http, started["anonymousId"])
    assert len(session["actions"]) == 3  # type: ignore[arg-type]
    assert (await tracker(page))["delivered"] == 1 + 3  # the start, then the three actions


async def test_opting_out_on_the_demo_removes_the_device_id_and_sends_nothing_more(
    device: BrowserContext,
) -> None:
    page = await device.new_page()
    traffic = Traffic().watch(page)
    await open_demo(page)
    await page.click("#opt-out")
    await page.wait_for_function(
        "() => document.getElementById('tracking').textContent === 'opted-out'"
    )
    stored = await page.evaluate("() => Object.keys(localStorage)")
    assert stored == ["pin.optOut"]

    await page.reload()  # the choice outlives the page
    await page.wait_for_function("() => window.pinTracker?.status === 'opted-out'")
    await page.click("button[data-favourite]")
    assert traffic.sent(ACTIONS_PATH) == 0
    assert await page.evaluate("() => window.pinTracker.anonymousId") is None

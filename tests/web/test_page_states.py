"""Every state each page can be in reads true, in real Chromium: the pages are stepped through
their states, each checked for what it claims, and each screenshotted.

The screenshots are test artefacts: ``NN-state.png`` in each test's ``tmp_path``, under
pytest's ``--basetemp`` (``pytest --basetemp=DIR`` puts them in ``DIR/<test name>0/``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
from playwright.async_api import BrowserContext, Page

from pin_sessions.platform.clock import FixedClock
from tests.identity.flows import new_phone
from tests.web.console import Complaints

NOT_TRACKED_VIEWING = "Nothing is recorded while this browser is not tracked."
UNKNOWN = "\u2013"  # the en dash the pages show for a value not known


async def demo_state(page: Page) -> dict[str, Any]:
    """What the demo shows, as a person reads it."""
    state: dict[str, Any] = await page.evaluate(
        """() => {
            const text = (id) => document.getElementById(id)?.textContent.trim() ?? null;
            const shown = (id) => !!document.getElementById(id) &&
                !document.getElementById(id).closest("[hidden]");
            return {
                anonymousId: text("anonymous-id"), session: text("session-id"),
                user: text("user-id"), tracking: text("tracking"), viewing: text("viewing"),
                status: text("status"),
                signedInAs: shown("signed-in-as") ? text("signed-in-as") : null,
                note: shown("tracking-note") ? text("tracking-note") : null,
                signOut: shown("sign-out"), signInForms: shown("sign-in-forms"),
                optOut: shown("opt-out"), optIn: shown("opt-in"),
                body: document.body.innerText,
            };
        }"""
    )
    return state


def assert_demo_agrees_with_itself(state: dict[str, Any], tokens: dict[str, Any] | None) -> None:
    """The invariants of every state: no part of the page contradicts another."""
    tracking = state["tracking"] == "tracking"
    if not tracking:  # what an opt-out used to leave behind
        assert not state["viewing"].startswith("Viewing"), state["viewing"]
        assert "the session is linked" not in state["body"]
        assert "linked to you" not in state["body"].replace("not linked to you", "")
    signed_in = tokens is not None
    assert state["signOut"] is signed_in
    assert state["signInForms"] is not signed_in
    assert (state["signedInAs"] is not None) is signed_in
    assert state["optIn"] is (state["tracking"] == "opted-out")
    assert state["optOut"] is (state["tracking"] != "opted-out")
    if not tracking:
        assert (state["user"], state["session"], state["anonymousId"]) == (UNKNOWN,) * 3
        assert state["viewing"] == NOT_TRACKED_VIEWING
        assert state["note"], "a page that records nothing says why"
    else:
        assert state["note"] is None
    if state["user"] == "guest":
        assert "is linked to you" not in state["body"]
    if tokens is not None and tracking and state["user"] == tokens["userId"]:
        assert "this device's session is linked to you" in state["signedInAs"]


async def tokens_of(page: Page) -> dict[str, Any] | None:
    saved = await page.evaluate("() => sessionStorage.getItem('pin.demo.tokens')")
    tokens: dict[str, Any] | None = json.loads(saved) if saved else None
    return tokens


async def step(page: Page, shots: Path, name: str) -> dict[str, Any]:
    """The page's state now, checked against itself and screenshotted as ``name``."""
    state = await demo_state(page)
    assert_demo_agrees_with_itself(state, await tokens_of(page))
    await page.screenshot(path=shots / f"{name}.png", full_page=True)
    return state


async def test_every_state_of_the_demo_reads_true(device: BrowserContext, tmp_path: Path) -> None:
    page = await device.new_page()
    complaints = Complaints().watch(page)
    await page.goto("/demo")
    await page.wait_for_function("() => window.pinTracker?.sessionId")
    await page.wait_for_function(
        "unknown => document.getElementById('session-id').textContent !== unknown", arg=UNKNOWN
    )
    guest = await step(page, tmp_path, "01-guest")
    assert (guest["user"], guest["tracking"]) == ("guest", "tracking")
    assert guest["viewing"] == "Not viewing a property."

    await page.click("text=Open Riverside flat")
    viewing = await step(page, tmp_path, "02-viewing")
    assert viewing["viewing"] == "Viewing Riverside flat."

    await page.click("#sign-in")  # the development one-click
    await page.wait_for_function("() => window.pinTracker.userId")
    await page.wait_for_function(
        "() => document.getElementById('user-id').textContent === window.pinTracker.userId"
    )
    tokens = await tokens_of(page)
    assert tokens is not None
    signed_in = await step(page, tmp_path, "03-signed-in")
    assert signed_in["user"] == tokens["userId"]
    assert "linked to you" in signed_in["status"]

    # The finding: after an opt-out the page kept "Sign out", "Signed in; the session is
    # linked." and "Viewing Riverside flat." while User read guest.
    await page.click("#opt-out")
    await page.wait_for_function(
        "() => document.getElementById('tracking').textContent === 'opted-out'"
    )
    opted_out = await step(page, tmp_path, "04-opted-out")
    assert opted_out["status"].startswith("Opted out")
    assert opted_out["viewing"] == NOT_TRACKED_VIEWING
    assert opted_out["signOut"]  # still signed in: the opt-out is about tracking
    assert "not tracked" in opted_out["signedInAs"]

    await page.click("text=Open Harbour office")  # records nothing, and says no more
    assert (await demo_state(page))["viewing"] == NOT_TRACKED_VIEWING

    await page.click("#opt-in")
    await page.wait_for_function(
        "() => document.getElementById('user-id').textContent === window.pinTracker.userId"
        " && window.pinTracker.userId !== null"
    )
    opted_in = await step(page, tmp_path, "05-opted-in")
    assert opted_in["tracking"] == "tracking"
    assert opted_in["session"] != signed_in["session"]  # a new device id, a new session
    assert opted_in["status"].startswith("Opted in") and "linked to you" in opted_in["status"]

    await page.click("#sign-out")
    await page.wait_for_function("() => document.getElementById('status').textContent")
    await page.wait_for_function(
        "() => document.getElementById('status').textContent.startsWith('Signed out')"
    )
    signed_out = await step(page, tmp_path, "06-signed-out")
    assert signed_out["user"] == "guest"
    assert signed_out["status"] == "Signed out; a new guest session started."

    await page.click("#forget")
    forgotten = await step(page, tmp_path, "07-forgotten")
    assert forgotten["tracking"] == "stopped"
    assert "Reload the page" in forgotten["note"]
    assert complaints.all() == []


async def dashboard_state(page: Page) -> dict[str, Any]:
    state: dict[str, Any] = await page.evaluate(
        """() => {
            const shown = (id) => !!document.getElementById(id) &&
                !document.getElementById(id).closest("[hidden]");
            return {
                signIn: shown("sign-in-panel"), noPermission: shown("no-permission"),
                dashboard: shown("dashboard"), range: shown("range-panel"),
                signOut: shown("sign-out") || shown("sign-out-denied"),
                today: document.getElementById("utc-today").textContent,
                status: document.getElementById("status").textContent,
                body: document.body.innerText,
            };
        }"""
    )
    return state


async def dashboard_step(page: Page, shots: Path, name: str) -> dict[str, Any]:
    state = await dashboard_state(page)
    assert state["today"] != UNKNOWN
    panels = [state["signIn"], state["noPermission"], state["dashboard"]]
    assert sum(panels) <= 1, state  # one panel at a time
    assert state["range"] is state["dashboard"]
    assert "`" not in state["body"]  # no markdown shown raw
    assert "/api/" not in state["body"]  # the page speaks of sessions, not of its API
    await page.screenshot(path=shots / f"{name}.png", full_page=True)
    return state


async def test_every_state_of_the_dashboard_reads_true(
    device: BrowserContext, http: httpx.AsyncClient, clock: FixedClock, tmp_path: Path
) -> None:
    page = await device.new_page()
    await page.clock.set_fixed_time(clock.now())  # the browser's today is the server's
    await page.goto("/dev-stats?reloadMs=0")
    await page.wait_for_selector("#sign-in-panel:not([hidden])")
    signed_out = await dashboard_step(page, tmp_path, "01-signed-out")
    assert signed_out["today"] == str(clock.now().date())
    assert not signed_out["signOut"]

    # A user without the permission signs in with a typed code.
    phone = new_phone()
    await page.fill("#phone", phone)
    async with page.expect_response("**/api/identity/sign-in/requests") as sent:
        await page.click("#send-code")
    request_id = (await (await sent.value).json())["requestId"]
    code = (await http.get(f"/dev/sign-in-codes/{request_id}")).json()["code"]
    await page.fill("#code", code)
    await page.click("#confirm-code")
    await page.wait_for_selector("#no-permission:not([hidden])")
    denied = await dashboard_step(page, tmp_path, "02-no-permission")
    assert "dev-stats.view" in denied["body"]
    assert denied["signOut"]  # it says sign out, and offers it
    assert "pin-sessions users grant" in (
        await page.text_content("#no-permission code:last-of-type") or ""
    )

    # Granted meanwhile: "Check again" picks the permission up with a refreshed token.
    granted = await http.post("/dev/dev-stats/viewers", json={"phoneNumber": phone})
    assert granted.status_code == 204
    await page.click("#check-again")
    await page.wait_for_selector("#dashboard:not([hidden])")
    await page.wait_for_selector("#chart-per-day[data-empty='true']")
    empty = await dashboard_step(page, tmp_path, "03-dashboard-empty")
    assert empty["signOut"]
    assert "No closed sessions in this range" in empty["body"]
    # No sessions, no durations: a dash, where it used to say "0 s".
    for figure in ("#n-avg", "#n-p50", "#n-p90"):
        assert await page.text_content(figure) == "—", figure

    await page.click("#sign-out")
    await page.wait_for_selector("#sign-in-panel:not([hidden])")
    again = await dashboard_step(page, tmp_path, "04-signed-out-again")
    assert again["status"] == "Signed out."
    assert not again["signOut"]

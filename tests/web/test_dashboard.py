"""The dev-stats dashboard in real Chromium: a developer signs in with the development code
flow, and the three charts draw the summary of sessions that really ended.

Screenshots (the whole page on a desktop and on a phone, and each chart) are kept as test
artefacts in the test's ``tmp_path``, under pytest's ``--basetemp``."""

from __future__ import annotations

import uuid
from datetime import timedelta
from pathlib import Path

import httpx
from playwright.async_api import BrowserContext, Page, ViewportSize

from pin_sessions.bootstrap.delivery import build_consumer
from pin_sessions.bootstrap.identity import build_token_signer
from pin_sessions.platform.clock import FixedClock
from pin_sessions.platform.messaging.metrics import MessagingMetrics
from pin_sessions.platform.metrics import new_registry
from pin_sessions.platform.runtime import Runtime
from pin_sessions.user_activity.closing import close_sessions
from tests.conftest import T0
from tests.support.users import signed_in_user
from tests.web import png

START = "/api/user-activity/sessions/start"
HEARTBEAT = "/api/user-activity/sessions/heartbeat"
LINK = "/api/user-activity/sessions/link"
GUEST_RGB = (0xE0, 0x7B, 0x39)  # --guest in pages.css
USER_RGB = (0x3A, 0x7B, 0xD5)  # --user in pages.css
DURATION_RGB = (0x2F, 0x6B, 0x4A)  # the duration histogram's bars
PHONE: ViewportSize = {"width": 390, "height": 844}


async def session_lasting(
    http: httpx.AsyncClient, clock: FixedClock, minutes: int, *, bearer: str | None = None
) -> uuid.UUID:
    """A device session whose last activity is ``minutes`` after its start."""
    started = (await http.post(START)).json()
    device = {"X-Anonymous-Id": started["anonymousId"]}
    if bearer is not None:
        linked = await http.post(LINK, headers={**device, "Authorization": f"Bearer {bearer}"})
        assert linked.status_code == 200, linked.text
    clock.advance(timedelta(minutes=minutes))
    assert (await http.post(HEARTBEAT, headers=device)).status_code == 200
    return uuid.UUID(started["sessionId"])


async def end_sessions_and_deliver(
    runtime: Runtime, clock: FixedClock, sessions: list[uuid.UUID]
) -> None:
    """What the activity closer and the dev-stats consumer do on ``up``, one pass each."""
    clock.advance(timedelta(minutes=20))
    async with runtime.database.transaction() as conn:
        closed = await close_sessions(conn, sessions, now=clock.now())
    assert len(closed.session_ids) == len(sessions)
    metrics = MessagingMetrics.register(new_registry())
    consumer = build_consumer(runtime, "dev-stats-session-ended", metrics)
    await consumer.run_once(clock.now())  # type: ignore[attr-defined]


def coloured_pixels(screenshot: bytes, rgb: tuple[int, int, int]) -> int:
    image = png.decode(screenshot)
    return sum(
        1
        for pixel in image.pixels()
        if all(abs(a - b) <= 12 for a, b in zip(pixel, rgb, strict=True))
    )


async def chart_shot(page: Page, selector: str, path: Path) -> bytes:
    shot: bytes = await page.locator(selector).screenshot(path=path)
    return shot


async def test_the_dashboard_draws_sessions_per_day_durations_and_guest_vs_user(
    device: BrowserContext,
    http: httpx.AsyncClient,
    runtime: Runtime,
    clock: FixedClock,
    tmp_path: Path,
) -> None:
    async with runtime.database.transaction() as conn:
        user = await signed_in_user(conn, build_token_signer(runtime), now=clock.now())
    sessions = [
        await session_lasting(http, clock, 2),
        await session_lasting(http, clock, 3),
        await session_lasting(http, clock, 10, bearer=user.access_token),
    ]
    await end_sessions_and_deliver(runtime, clock, sessions)
    assert (await http.post(START)).status_code == 200  # one session still open

    page = await device.new_page()
    await page.clock.set_fixed_time(clock.now())  # the browser's today is the server's
    day = T0.date()
    await page.goto(f"/dev-stats?from={day - timedelta(days=6)}&to={day}&reloadMs=0")
    await page.click("#sign-in")  # grants dev-stats.view, then signs in with the dev code
    await page.wait_for_selector("#chart-per-day[data-empty='false']")

    assert await page.text_content("#n-open") == "1"
    assert await page.text_content("#n-sessions") == "3"
    assert await page.text_content("#n-guest") == "2"
    assert await page.text_content("#n-user") == "1"
    assert await page.locator("#chart-per-day rect.bar").count() == 2  # guest + user, one day
    # Every day of the range is labelled, today by name and outlined.
    labels = await page.locator("#chart-per-day text:not(.value)").all_text_contents()
    assert [label for label in labels if "-" in label or label == "today"] == [
        *(str(day - timedelta(days=n))[5:] for n in range(6, 0, -1)),
        "today",
    ]
    assert await page.locator("#chart-per-day rect.marked").count() == 1
    assert "UTC" in (await page.text_content("#utc-note") or "")
    assert await page.text_content("#utc-today") == str(day)
    # A real histogram: 2 and 3 minutes share the 2 to 5 min range, 10 minutes is in 10 to 15 min.
    bars = await page.locator("#chart-durations rect.bar title").all_text_contents()
    assert bars == ["2 min: 2 sessions", "10 min: 1 sessions"]
    assert await page.locator("#chart-guest-user path.slice").count() == 2

    await page.screenshot(path=tmp_path / "dashboard.png", full_page=True)
    per_day = await chart_shot(page, "#chart-per-day", tmp_path / "per-day.png")
    durations = await chart_shot(page, "#chart-durations", tmp_path / "durations.png")
    donut = await chart_shot(page, "#chart-guest-user", tmp_path / "guest-user.png")
    assert coloured_pixels(per_day, GUEST_RGB) > 200
    assert coloured_pixels(per_day, USER_RGB) > 100
    assert coloured_pixels(durations, DURATION_RGB) > 200
    # Two guests to one user: the guest share of the donut is about twice the user's.
    guest, signed_in = coloured_pixels(donut, GUEST_RGB), coloured_pixels(donut, USER_RGB)
    assert signed_in > 500
    assert 1.6 < guest / signed_in < 2.4


async def test_without_the_permission_the_dashboard_says_so_instead_of_drawing(
    device: BrowserContext, http: httpx.AsyncClient, runtime: Runtime, clock: FixedClock
) -> None:
    async with runtime.database.transaction() as conn:
        user = await signed_in_user(conn, build_token_signer(runtime), now=clock.now())
    page = await device.new_page()
    await page.goto("/dev-stats?reloadMs=0")
    await page.evaluate(
        "token => sessionStorage.setItem("
        "'pin.devStats.tokens', JSON.stringify({accessToken: token}))",
        user.access_token,
    )
    await page.reload()
    await page.wait_for_selector("#no-permission:not([hidden])")
    assert "dev-stats.view" in (await page.text_content("#no-permission") or "")
    assert await page.locator("#sign-out-denied").is_visible()  # it offers what it says
    assert await page.locator("#dashboard").is_hidden()


async def test_signing_out_just_after_a_resize_stays_signed_out(
    device: BrowserContext, clock: FixedClock
) -> None:
    # The charts redraw 150 ms after a resize (a full-page screenshot is one); a redraw due
    # after the sign-out used to show the dashboard again over the sign-in panel.
    page = await device.new_page()
    await page.clock.set_fixed_time(clock.now())  # the browser's today is the server's
    await page.goto("/dev-stats?reloadMs=0")
    await page.click("#sign-in")
    await page.wait_for_selector("#dashboard:not([hidden])")
    await page.click("#sign-out")
    await page.wait_for_selector("#sign-in-panel:not([hidden])")
    await page.evaluate("() => window.dispatchEvent(new Event('resize'))")
    await page.evaluate("() => new Promise((done) => setTimeout(done, 400))")  # the redraw's turn
    assert await page.locator("#sign-in-panel").is_visible()
    assert await page.locator("#dashboard").is_hidden()


async def test_the_dashboard_is_readable_on_a_phone_and_exports_the_range_as_csv(
    device: BrowserContext,
    http: httpx.AsyncClient,
    runtime: Runtime,
    clock: FixedClock,
    tmp_path: Path,
) -> None:
    await end_sessions_and_deliver(runtime, clock, [await session_lasting(http, clock, 4)])
    page = await device.new_page()
    await page.set_viewport_size(PHONE)
    await page.clock.set_fixed_time(clock.now())
    day = T0.date()
    await page.goto(f"/dev-stats?from={day - timedelta(days=29)}&to={day}&reloadMs=0")
    await page.click("#sign-in")
    await page.wait_for_selector("#chart-per-day[data-empty='false']")
    await page.screenshot(path=tmp_path / "dashboard-phone.png", full_page=True)

    # Numbers and chart text at a size a phone can show: the charts are drawn at the width
    # they take, not shrunk from a desktop drawing.
    number_px = await page.evaluate(
        "() => parseFloat(getComputedStyle(document.getElementById('n-sessions')).fontSize)"
    )
    assert number_px >= 20
    smallest_chart_text = await page.evaluate(
        """() => Math.min(...[...document.querySelectorAll("svg.chart text")]
                 .map((text) => text.getBoundingClientRect().height))"""
    )
    assert smallest_chart_text >= 11
    assert await page.evaluate("() => document.documentElement.scrollWidth") <= PHONE["width"]

    async with page.expect_download() as download_info:
        await page.click("#export-csv")
    download = await download_info.value
    assert download.suggested_filename == f"sessions-{day - timedelta(days=29)}-to-{day}.csv"
    lines = Path(await download.path()).read_text().splitlines()
    assert lines[0] == "date_utc,sessions,guest_sessions,user_sessions,avg_duration_seconds"
    assert len(lines) == 1 + 30  # every day of the range, quiet days included
    assert lines[-1] == f"{day},1,1,0,240.0"

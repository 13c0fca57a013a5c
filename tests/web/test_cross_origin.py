"""The tracker on a page of another origin, in real Chromium: the page is served from
``http://127.0.0.1:<port>``, the API from ``http://localhost:<port>`` (two loopback origins),
with real CORS preflights, and a network that loses requests and answers.

What must hold whatever the network does: one AnonymousId and one Active session per device
(several tabs, reloads, retries), and each click recorded once (the tracker's Idempotency-Key).
"""

from __future__ import annotations

import itertools
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from playwright.async_api import Browser, BrowserContext, Page, Route
from prometheus_client import CollectorRegistry

from pin_sessions.platform.clock import FixedClock
from pin_sessions.platform.runtime import Runtime
from tests.support.waiting import wait_until

HEARTBEAT = "/api/user-activity/sessions/heartbeat"

# The shop's page: the script-tag build from the API's origin, the API as baseUrl; the query
# string says where the API is and how patient the tracker is.
SHOP_PAGE = b"""<!doctype html>
<html><head><meta charset="utf-8"><title>Shop</title></head>
<body>
<button id="favourite">Favourite</button>
<button id="view">View</button>
<script>
  const params = new URLSearchParams(location.search);
  const api = params.get("api");
  window.escaped = 0;
  window.addEventListener("error", () => (window.escaped += 1));
  window.addEventListener("unhandledrejection", () => (window.escaped += 1));
  const script = document.createElement("script");
  script.src = api + "/static/pin-tracker.iife.js";
  script.onload = () => {
    if (params.has("manual")) return; // the test makes its own trackers
    window.pinTracker = PinTracker.createTracker({
      baseUrl: api, retryBaseMs: 20, retryMaxMs: 100,
      maxAttempts: Number(params.get("attempts") || 10),
    });
    document.getElementById("favourite").onclick = () => pinTracker.track("favourite-added");
    document.getElementById("view").onclick = () =>
      pinTracker.viewStart("0b7f8c3e-6a52-4c1e-9d1a-5f0c2a7e4b11");
  };
  document.head.append(script);
</script>
</body></html>
"""


class _ShopHandler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(SHOP_PAGE)))
        self.end_headers()
        self.wfile.write(SHOP_PAGE)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the test reads the API's tables, not this server's log."""


def serve_shop() -> tuple[ThreadingHTTPServer, str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _ShopHandler)
    threading.Thread(target=server.serve_forever, name="shop", daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


@pytest.fixture
def shop_origin() -> Iterator[str]:
    server, origin = serve_shop()
    try:
        yield origin
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def settings_env(settings_env: dict[str, str], shop_origin: str) -> dict[str, str]:
    return {**settings_env, "PIN_HTTP__CORS_ORIGINS": shop_origin}


@pytest.fixture
def api_origin(api_url: str) -> str:
    """The same server under its other loopback name: another origin than the shop's."""
    return api_url.replace("127.0.0.1", "localhost")


@pytest.fixture
async def shopper(browser: Browser) -> AsyncIterator[BrowserContext]:
    """One device (one profile) visiting the shop."""
    context = await browser.new_context()
    context.set_default_timeout(30_000)
    try:
        yield context
    finally:
        await context.close()


async def open_shop(page: Page, shop: str, api: str, attempts: int = 10) -> str:
    await page.goto(f"{shop}/?api={api}&attempts={attempts}")
    await page.wait_for_function("() => window.pinTracker?.sessionId")
    anonymous_id: str = await page.evaluate("() => pinTracker.anonymousId")
    return anonymous_id


async def table_counts(runtime: Runtime) -> dict[str, int]:
    async with runtime.database.connection() as conn:
        row = await conn.fetchrow(
            """select (select count(*) from user_activity.sessions) as sessions,
                      (select count(*) from user_activity.sessions where status = 'Active')
                          as active,
                      (select count(distinct anonymous_id) from user_activity.sessions)
                          as devices,
                      (select count(*) from user_activity.action_events) as actions,
                      (select count(*) from user_activity.property_object_views) as views"""
        )
    assert row is not None
    return dict(row)


async def test_a_page_on_a_listed_origin_tracks_through_real_preflights(
    shopper: BrowserContext, shop_origin: str, api_origin: str, runtime: Runtime
) -> None:
    page = await shopper.new_page()
    preflights: list[str] = []
    page.on("request", lambda r: preflights.append(r.url) if r.method == "OPTIONS" else None)
    anonymous_id = await open_shop(page, shop_origin, api_origin)
    await page.click("#favourite")
    await page.wait_for_function("() => pinTracker.stats.delivered === 2")

    counts = await table_counts(runtime)
    assert (counts["sessions"], counts["actions"]) == (1, 1)
    async with runtime.database.connection() as conn:
        stored = await conn.fetchval("select anonymous_id::text from user_activity.sessions")
    assert stored == anonymous_id  # the id the API issued, kept by the tracker
    assert await page.evaluate("() => window.escaped") == 0


async def test_a_page_on_an_unlisted_origin_reaches_nothing(
    shopper: BrowserContext, api_origin: str, runtime: Runtime
) -> None:
    server, unlisted = serve_shop()
    try:
        page = await shopper.new_page()
        await page.goto(f"{unlisted}/?api={api_origin}&attempts=3")
        await page.wait_for_function("() => window.pinTracker")
        assert await page.evaluate("() => pinTracker.start()") is None
        assert await page.evaluate("() => pinTracker.track('x')") is None
    finally:
        server.shutdown()
        server.server_close()
    # The preflight was refused, so the POSTs never left the browser: nothing was recorded.
    assert await table_counts(runtime) == {
        "sessions": 0,
        "active": 0,
        "devices": 0,
        "actions": 0,
        "views": 0,
    }
    assert await page.evaluate("() => window.escaped") == 0


async def test_closing_the_page_sends_its_last_heartbeat_across_origins_with_keepalive(
    shopper: BrowserContext,
    shop_origin: str,
    api_origin: str,
    runtime: Runtime,
    clock: FixedClock,
    registry: CollectorRegistry,
) -> None:
    """The tab closes with activity since the last heartbeat: the tracker's final heartbeat
    is a `keepalive` fetch, preflighted across origins, that outlives the page. (The page is
    gone, so the browser's side of it is not observable: the API's is.)"""
    page = await shopper.new_page()
    anonymous_id = await open_shop(page, shop_origin, api_origin)
    await page.click("#favourite")  # activity the server has not heard of by heartbeat
    await page.wait_for_function("() => pinTracker.stats.delivered === 2")
    assert await page.evaluate("() => pinTracker.stats.heartbeats") == 0
    clock.advance(timedelta(seconds=20))  # only a heartbeat from now on can reach this time

    await page.close(run_before_unload=True)

    labels = {"method": "POST", "route": HEARTBEAT, "status": "200"}

    async def extended_and_answered() -> bool:
        # The row is extended before the answer is counted: wait for both, or the count
        # may be read in between.
        if registry.get_sample_value("pin_http_requests_total", labels) is None:
            return False
        async with runtime.database.connection() as conn:
            last = await conn.fetchval(
                "select last_activity_at from user_activity.sessions"
                " where anonymous_id = $1 and status = 'Active'",
                uuid.UUID(anonymous_id),
            )
        return bool(last == clock.now())

    await wait_until(extended_and_answered, timeout=20)
    assert registry.get_sample_value("pin_http_requests_total", labels) == 1


async def test_stop_sends_nothing_more_and_debug_names_the_cors_setting(
    shopper: BrowserContext, api_origin: str
) -> None:
    """A page on an origin the API does not list: every request fails before any answer.
    After ``stop()`` none leaves (it used to retry ten times); with ``debug`` the console
    names the setting that would let this origin in."""
    server, unlisted = serve_shop()
    try:
        page = await shopper.new_page()
        posts: list[str] = []
        page.on("request", lambda r: posts.append(r.url) if r.method == "POST" else None)
        console: list[str] = []
        page.on("console", lambda message: console.append(message.text))
        await page.goto(f"{unlisted}/?api={api_origin}&manual=1")
        await page.wait_for_function("() => window.PinTracker")
        status = await page.evaluate(
            """api => {
                const tracker = PinTracker.createTracker({
                    baseUrl: api, retryBaseMs: 20, retryMaxMs: 50, maxAttempts: 10 });
                tracker.stop();
                return tracker.status;
            }""",
            api_origin,
        )
        assert status == "stopped"
        # Ten tries at these delays take well under a second; give them two.
        await page.wait_for_timeout(2_000)
        assert posts == []

        started = await page.evaluate(
            """api => PinTracker.createTracker({ baseUrl: api, debug: true,
                retryBaseMs: 20, retryMaxMs: 50, maxAttempts: 2 }).start()""",
            api_origin,
        )
        assert started is None
        failures = [line for line in console if "PIN_HTTP__CORS_ORIGINS" in line]
        assert failures, console
        assert unlisted in failures[0]
        assert any("status: tracking" in line for line in console), console
    finally:
        server.shutdown()
        server.server_close()


class FlakyNetwork:
    """Of every three API requests: one never reaches the server, one reaches it and its
    answer is lost, one goes through. Then the network recovers."""

    def __init__(self) -> None:
        self._count = itertools.count()
        self.lost_answers = 0
        self.healthy = False

    async def handle(self, route: Route) -> None:
        if self.healthy or route.request.method == "OPTIONS":
            await route.continue_()
            return
        turn = next(self._count) % 3
        if turn == 0:
            await route.abort("connectionreset")
        elif turn == 1:
            await route.fetch()  # the server does the work...
            self.lost_answers += 1
            await route.abort("connectionreset")  # ...and the browser never hears of it
        else:
            await route.continue_()


async def test_tabs_reloads_and_a_failing_network_make_one_session_and_record_each_click_once(
    shopper: BrowserContext, shop_origin: str, api_origin: str, runtime: Runtime
) -> None:
    network = FlakyNetwork()
    await shopper.route(f"{api_origin}/api/**", network.handle)
    tabs = [await shopper.new_page() for _ in range(3)]
    # Patient trackers: under this network an item may fail many times before it passes.
    ids = {await open_shop(tab, shop_origin, api_origin, attempts=40) for tab in tabs}
    assert len(ids) == 1

    clicks = 0
    for round_ in range(3):
        for tab in tabs:
            await tab.click("#favourite")
            clicks += 1
        await tabs[0].click("#view")
        if round_ == 1:
            # A reload while items are in flight: the next page sends what is stored.
            await tabs[1].reload()
            await tabs[1].wait_for_function("() => window.pinTracker?.sessionId")
    network.healthy = True
    for tab in tabs:
        await tab.wait_for_function("() => pinTracker.pending === 0")

    assert network.lost_answers > 0
    counts = await table_counts(runtime)
    assert counts == {"sessions": 1, "active": 1, "devices": 1, "actions": clicks, "views": 3}
    for tab in tabs:
        assert await tab.evaluate("() => window.escaped") == 0
        assert await tab.evaluate("() => pinTracker.stats.dropped") == 0

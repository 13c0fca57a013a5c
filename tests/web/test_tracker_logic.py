"""The tracker's queue and backoff rules, unit-tested inside Chromium with a scripted ``fetch``.

The module under test is the very file the API serves; only the network is replaced, so each
rule is checked exactly (which request, how often, in which order) without waiting on timers
longer than a few milliseconds.
"""

from __future__ import annotations

from typing import Any

import pytest
from playwright.async_api import BrowserContext, Page

# A tracker wired to fakes: a scripted fetch, an in-memory storage, a window whose
# `navigator.onLine` the test sets, and a document that is always visible.
HARNESS = """
async ({ responses, options, online }) => {
  const { createTracker, retryDelay } = await import("/static/pin-tracker.js");
  const calls = [];
  const script = [...responses];
  const fetch = async (url, init) => {
    calls.push({ path: new URL(url, location.href).pathname, body: init.body ?? null,
                 anonymousId: init.headers["X-Anonymous-Id"] ?? null });
    const next = script.length ? script.shift() : 200;
    if (next === "network") throw new TypeError("Failed to fetch");
    const payload = { sessionId: "s-1", anonymousId: "a-1", actionId: `x-${calls.length}` };
    return new Response(JSON.stringify(payload), { status: next });
  };
  const win = new EventTarget();
  win.navigator = { onLine: online };
  const doc = new EventTarget();
  doc.visibilityState = "visible";
  const memory = new Map([["pin.anonymousId", "a-1"]]);
  const storage = {
    getItem: (key) => memory.get(key) ?? null,
    setItem: (key, value) => memory.set(key, String(value)),
    removeItem: (key) => memory.delete(key),
  };
  const tracker = createTracker({
    fetch, window: win, document: doc, storage, autoStart: false, random: () => 1,
    retryBaseMs: 5, retryMaxMs: 20, ...options,
  });
  window.harness = { tracker, calls, win, retryDelay };
}
"""


async def harness(page: Page, responses: list[Any], *, online: bool = True, **options: Any) -> None:
    await page.goto("/healthz")  # any page of the API's origin, to import the module from
    await page.evaluate(HARNESS, {"responses": responses, "options": options, "online": online})


async def go_online(page: Page) -> None:
    await page.evaluate(
        """() => {
            harness.win.navigator.onLine = true;
            harness.win.dispatchEvent(new Event("online"));
        }"""
    )


@pytest.fixture
async def page(device: BrowserContext) -> Page:
    return await device.new_page()


async def test_a_failed_delivery_is_retried_and_each_item_is_sent_once_after_success(
    page: Page,
) -> None:
    await harness(page, ["network", 201, 201, 201])
    results = await page.evaluate(
        """() => Promise.all(["a", "b", "c"].map((type) => harness.tracker.track(type)))"""
    )
    calls = await page.evaluate("() => harness.calls.map((call) => JSON.parse(call.body).type)")

    # The head of the queue is retried until accepted; nothing overtakes it, nothing repeats.
    assert calls == ["a", "a", "b", "c"]
    assert [result["actionId"] for result in results] == ["x-2", "x-3", "x-4"]
    stats = await page.evaluate("() => harness.tracker.stats")
    assert stats["retries"] == 1
    assert stats["delivered"] == 3
    assert stats["pending"] == 0


async def test_a_refused_item_is_dropped_without_retry(page: Page) -> None:
    await harness(page, [422, 201])
    results = await page.evaluate(
        """() => Promise.all([harness.tracker.track("bad"), harness.tracker.track("good")])"""
    )
    assert results[0] is None
    assert results[1]["actionId"] == "x-2"
    assert await page.evaluate("() => harness.calls.length") == 2


async def test_retry_delays_grow_exponentially_up_to_the_cap(page: Page) -> None:
    await harness(page, [])
    highest = await page.evaluate(
        "() => [0, 1, 2, 3, 4, 10].map((n) => harness.retryDelay(n, 1000, 60000, () => 1))"
    )
    lowest = await page.evaluate(
        "() => [0, 1, 2, 3].map((n) => harness.retryDelay(n, 1000, 60000, () => 0))"
    )
    assert highest == [1000, 2000, 4000, 8000, 16000, 60000]
    assert lowest == [500, 1000, 2000, 4000]


async def test_a_full_offline_queue_drops_the_oldest_action_but_keeps_the_start(
    page: Page,
) -> None:
    await harness(page, [], online=False, maxQueueSize=3)
    await page.evaluate(
        """() => {
            window.results = [];
            harness.tracker.start();
            for (const type of ["a", "b", "c"]) {
                harness.tracker.track(type).then((result) => results.push([type, result]));
            }
        }"""
    )
    await page.wait_for_function("() => results.length === 1")
    assert await page.evaluate("() => results") == [["a", None]]
    stats = await page.evaluate("() => harness.tracker.stats")
    assert (stats["pending"], stats["dropped"]) == (3, 1)
    assert await page.evaluate("() => harness.calls.length") == 0

    # Back online: the start goes first, then what is left, each once.
    await go_online(page)
    await page.wait_for_function("() => harness.tracker.pending === 0")
    paths = await page.evaluate("() => harness.calls.map((call) => call.path)")
    assert paths == [
        "/api/user-activity/sessions/start",
        "/api/user-activity/actions",
        "/api/user-activity/actions",
    ]


async def test_items_queued_before_a_reset_keep_the_identity_they_happened_under(
    page: Page,
) -> None:
    await harness(page, [], online=False)
    await page.evaluate("""() => { harness.tracker.track("before"); harness.tracker.reset(); }""")
    await go_online(page)
    await page.wait_for_function("() => harness.tracker.pending === 0")
    calls = await page.evaluate("() => harness.calls.map((c) => [c.path, c.anonymousId])")
    assert calls == [
        ["/api/user-activity/actions", "a-1"],
        ["/api/user-activity/sessions/start", None],  # a new device identity is issued
    ]


async def test_a_stored_id_the_api_refuses_is_replaced_by_a_new_one(page: Page) -> None:
    await harness(page, [400, 200])
    started = await page.evaluate("() => harness.tracker.start()")
    calls = await page.evaluate("() => harness.calls.map((c) => [c.path, c.anonymousId])")
    assert calls == [
        ["/api/user-activity/sessions/start", "a-1"],
        ["/api/user-activity/sessions/start", None],
    ]
    assert started["sessionId"] == "s-1"

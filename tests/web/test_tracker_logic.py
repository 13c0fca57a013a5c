"""The tracker's queue and backoff rules, unit-tested inside Chromium with a scripted ``fetch``.

The module under test is the very file the API serves; only the network is replaced, so each
rule is checked exactly (which request, how often, in which order) without waiting on timers
longer than a few milliseconds.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from playwright.async_api import BrowserContext, Page

# A tracker wired to fakes: a scripted fetch, a storage the test can read (or make throw), a
# window whose `navigator` the test sets, and a document that is always visible. Errors that
# reach the page are counted: the tracker must never let one escape.
HARNESS = """
async ({ responses, options, online, navigator, stored, brokenStorage }) => {
  const { createTracker, retryDelay } = await import("/static/pin-tracker.js");
  window.escaped = 0;
  window.addEventListener("error", () => (window.escaped += 1));
  window.addEventListener("unhandledrejection", () => (window.escaped += 1));
  const calls = [];
  const script = [...responses];
  const fetch = async (url, init) => {
    calls.push({ path: new URL(url, location.href).pathname, body: init.body ?? null,
                 anonymousId: init.headers["X-Anonymous-Id"] ?? null,
                 key: init.headers["Idempotency-Key"] ?? null, keepalive: !!init.keepalive });
    const next = script.length ? script.shift() : 200;
    if (next === "network") throw new TypeError("Failed to fetch");
    if (next === "html") return new Response("<html>hello</html>", { status: 200 });
    const n = calls.length;
    const payload = { sessionId: "s-1", actionId: `x-${n}`, viewId: `v-${n}` };
    return new Response(JSON.stringify(payload), { status: next });
  };
  const win = new EventTarget();
  win.navigator = { onLine: online, ...navigator };
  win.crypto = window.crypto;
  const doc = new EventTarget();
  doc.visibilityState = "visible";
  const memory = new Map(Object.entries(stored));
  const storage = brokenStorage ? {
    getItem() { throw new Error("denied"); }, setItem() { throw new Error("denied"); },
    removeItem() { throw new Error("denied"); }, key() { throw new Error("denied"); },
    get length() { throw new Error("denied"); },
  } : {
    getItem: (key) => memory.get(key) ?? null,
    setItem: (key, value) => memory.set(key, String(value)),
    removeItem: (key) => memory.delete(key),
    key: (index) => [...memory.keys()][index] ?? null,
    get length() { return memory.size; },
  };
  const make = (more = {}) => createTracker({
    fetch, window: win, document: doc, storage, indexedDB: null, autoStart: false,
    random: () => 1, retryBaseMs: 5, retryMaxMs: 20, ...options, ...more,
  });
  window.harness = { tracker: make(), make, calls, win, doc, memory, retryDelay };
}
"""
DEVICE = "6f1c7a52-2b1e-4c8d-9a0f-3e5d7b9c1a22"


async def harness(
    page: Page,
    responses: list[Any],
    *,
    online: bool = True,
    navigator: dict[str, Any] | None = None,
    stored: dict[str, str] | None = None,
    broken_storage: bool = False,
    **options: Any,
) -> None:
    await page.goto("/healthz")  # any page of the API's origin, to import the module from
    await page.evaluate(
        HARNESS,
        {
            "responses": responses,
            "options": options,
            "online": online,
            "navigator": navigator or {},
            "stored": {"pin.anonymousId": DEVICE} if stored is None else stored,
            "brokenStorage": broken_storage,
        },
    )


async def calls(page: Page, *fields: str) -> list[Any]:
    """What the scripted fetch was asked, one field (or a list of fields) per call."""
    result: list[Any] = await page.evaluate(
        "fields => harness.calls.map((call) => fields.length === 1 ? call[fields[0]]"
        " : fields.map((field) => call[field]))",
        list(fields),
    )
    return result


async def stored(page: Page) -> dict[str, str]:
    result: dict[str, str] = await page.evaluate("() => Object.fromEntries(harness.memory)")
    return result


async def go_online(page: Page) -> None:
    await page.evaluate(
        """() => {
            harness.win.navigator.onLine = true;
            harness.win.dispatchEvent(new Event("online"));
        }"""
    )


async def no_escaped_errors(page: Page) -> None:
    assert await page.evaluate("() => window.escaped") == 0


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
    types = await page.evaluate("() => harness.calls.map((call) => JSON.parse(call.body).type)")

    # The head of the queue is retried until accepted; nothing overtakes it, nothing repeats.
    assert types == ["a", "a", "b", "c"]
    keys = await calls(page, "key")
    # A retry is the same item: same Idempotency-Key, so the API records it once.
    assert keys[0] == keys[1] and len(set(keys)) == 3
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
    await page.evaluate(
        """() => { harness.tracker.start(); harness.tracker.track("before");
                   harness.tracker.reset(); }"""
    )
    await go_online(page)
    await page.wait_for_function("() => harness.tracker.pending === 0")
    sent = await calls(page, "path", "anonymousId")
    fresh = await page.evaluate("() => harness.tracker.anonymousId")
    assert fresh != DEVICE
    assert sent == [
        ["/api/user-activity/sessions/start", DEVICE],
        ["/api/user-activity/actions", DEVICE],
        ["/api/user-activity/sessions/start", fresh],  # the new identity, made on the device
    ]
    assert (await stored(page))["pin.anonymousId"] == fresh


async def test_the_anonymous_id_is_made_before_the_first_start_and_retries_keep_it(
    page: Page,
) -> None:
    await harness(page, ["network", 503, 200], stored={})
    await page.evaluate("() => harness.tracker.start()")
    sent = await calls(page, "path", "anonymousId")
    assert [path for path, _ in sent] == ["/api/user-activity/sessions/start"] * 3
    [device] = {anonymous_id for _, anonymous_id in sent}
    assert re.fullmatch(
        r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}", device
    )
    assert (await stored(page))["pin.anonymousId"] == device


async def test_a_corrupted_stored_id_is_replaced_before_anything_is_sent(page: Page) -> None:
    await harness(page, [], stored={"pin.anonymousId": "garbage"})
    await page.evaluate("() => harness.tracker.start()")
    [device] = await calls(page, "anonymousId")
    assert device not in (None, "garbage")


async def test_with_consent_required_nothing_is_sent_or_stored_until_consent(page: Page) -> None:
    await harness(page, [], stored={}, requireConsent=True, autoStart=True)
    dropped = await page.evaluate("() => harness.tracker.track('before-consent')")
    assert dropped is None
    assert await page.evaluate("() => harness.tracker.status") == "no-consent"
    assert await calls(page, "path") == []
    assert await stored(page) == {}

    await page.evaluate("() => harness.tracker.consent(true)")
    await page.wait_for_function("() => harness.tracker.sessionId")
    assert await calls(page, "path") == ["/api/user-activity/sessions/start"]
    assert (await stored(page))["pin.consent"] == "granted"
    assert await page.evaluate("() => harness.tracker.status") == "tracking"


async def test_opting_out_forgets_the_device_and_is_remembered_until_opting_in(
    page: Page,
) -> None:
    await harness(page, [], online=False)
    await page.evaluate("() => { harness.tracker.start(); harness.tracker.track('queued'); }")
    assert any(key.startswith("pin.q.") for key in await stored(page))

    await page.evaluate("() => harness.tracker.optOut()")
    assert await stored(page) == {"pin.optOut": "1"}
    # The next page load of this device: still opted out, nothing sent.
    await go_online(page)
    await page.evaluate("() => { window.next = harness.make({ autoStart: true }); }")
    assert await page.evaluate("() => next.status") == "opted-out"
    assert await page.evaluate("() => next.track('after')") is None
    assert await calls(page, "path") == []

    await page.evaluate("() => next.optIn()")
    await page.wait_for_function("() => next.sessionId")
    assert await calls(page, "path") == ["/api/user-activity/sessions/start"]
    assert "pin.optOut" not in await stored(page)


@pytest.mark.parametrize(
    "navigator", [{"doNotTrack": "1"}, {"globalPrivacyControl": True}], ids=["dnt", "gpc"]
)
async def test_do_not_track_and_global_privacy_control_are_respected_by_default(
    page: Page, navigator: dict[str, Any]
) -> None:
    await harness(page, [], stored={}, navigator=navigator, autoStart=True)
    assert await page.evaluate("() => harness.tracker.track('x')") is None
    assert await page.evaluate("() => harness.tracker.status") == "do-not-track"
    assert await calls(page, "path") == []
    assert await stored(page) == {}
    # A site that does not honour the signal says so explicitly.
    await page.evaluate("() => { window.other = harness.make({ respectDoNotTrack: false }); }")
    assert await page.evaluate("() => other.start().then((started) => !!started)")


async def test_forget_stops_and_removes_every_stored_id_and_queued_item(page: Page) -> None:
    await harness(page, [], online=False)
    await page.evaluate(
        """() => { harness.tracker.start(); harness.tracker.track("a");
                   harness.tracker.viewStart("0b7f8c3e-6a52-4c1e-9d1a-5f0c2a7e4b11"); }"""
    )
    await page.evaluate("() => harness.tracker.forget()")
    assert await stored(page) == {}
    assert await page.evaluate("() => [harness.tracker.anonymousId, harness.tracker.pending]") == [
        None,
        0,
    ]
    await go_online(page)
    assert await page.evaluate("() => harness.tracker.track('after')") is None
    assert await calls(page, "path") == []


async def test_the_queue_survives_a_page_load_and_is_sent_once_with_its_keys(page: Page) -> None:
    await harness(page, [], online=False)
    await page.evaluate(
        """() => { harness.tracker.start(); harness.tracker.track("a");
                   harness.tracker.viewStart("0b7f8c3e-6a52-4c1e-9d1a-5f0c2a7e4b11");
                   harness.tracker.viewEnd(); harness.tracker.stop(); }"""
    )
    queued = {
        json.loads(value)["key"]: json.loads(value)
        for name, value in (await stored(page)).items()
        if name.startswith("pin.q.")
    }
    assert [item["kind"] for item in sorted(queued.values(), key=lambda i: i["seq"])] == [
        "action",
        "viewStart",
        "viewEnd",
    ]

    # The page is gone; the next one finds the queue and delivers it, in order, each once.
    await go_online(page)
    await page.evaluate("() => { window.next = harness.make({ autoStart: true }); }")
    await page.wait_for_function("() => next.sessionId && next.pending === 0")
    sent = await calls(page, "path", "key")
    assert [path for path, _ in sent] == [
        "/api/user-activity/sessions/start",
        "/api/user-activity/actions",
        "/api/user-activity/property-views",
        "/api/user-activity/property-views/v-3/end",
    ]
    action, view = queued_keys = [key for _, key in sent[1:3]]
    assert set(queued_keys) <= set(queued)
    assert action != view
    assert not any(name.startswith("pin.q.") for name in await stored(page))


async def test_stored_items_are_bounded_and_the_oldest_go_first(page: Page) -> None:
    await harness(page, [], online=False, maxQueueSize=4)
    await page.evaluate(
        """() => { harness.tracker.start();
                   for (let n = 0; n < 10; n++) harness.tracker.track(`t${n}`); }"""
    )
    bodies = [
        json.loads(value)["body"]["type"]
        for name, value in sorted((await stored(page)).items())
        if name.startswith("pin.q.")
    ]
    assert sorted(bodies) == ["t7", "t8", "t9"]  # the start holds the fourth place
    assert await page.evaluate("() => harness.tracker.stats.dropped") == 7


async def test_hiding_the_page_sends_the_queue_with_keepalive(page: Page) -> None:
    # The first try fails and its retry waits 10 s: only the hiding can send now.
    await harness(page, [201, "network"], retryBaseMs=20_000, retryMaxMs=20_000)
    await page.evaluate("() => harness.tracker.start()")
    await page.evaluate("() => { harness.tracker.track('a'); harness.tracker.track('b'); }")
    await page.wait_for_function("() => harness.calls.length === 2")
    await page.evaluate("() => harness.win.dispatchEvent(new Event('pagehide'))")
    await page.wait_for_function("() => harness.tracker.pending === 0")
    sent = await calls(page, "path", "keepalive", "key")
    assert [keepalive for _, keepalive, _ in sent] == [False, False, True, True]
    assert sent[1][2] == sent[2][2]  # the failed one again, under its key
    await no_escaped_errors(page)


@pytest.mark.parametrize("answer", [500, "html", "network"])
async def test_a_broken_server_costs_a_bounded_number_of_tries_and_no_page_error(
    page: Page, answer: Any
) -> None:
    await harness(page, [answer] * 50, maxAttempts=4)
    result = await page.evaluate("() => harness.tracker.track('x')")
    assert result is None
    tries = 1 if answer == "html" else 4  # a 200 that is not the API's answer: never retried
    assert len(await calls(page, "path")) == tries
    await page.wait_for_timeout(100)  # twenty times the longest retry delay: nothing more
    assert len(await calls(page, "path")) == tries
    await no_escaped_errors(page)


async def test_storage_that_throws_leaves_the_tracker_working_in_memory(page: Page) -> None:
    await harness(page, [], broken_storage=True, autoStart=True)
    await page.wait_for_function("() => harness.tracker.sessionId")
    assert await page.evaluate("() => harness.tracker.track('x').then((r) => !!r)")
    await page.evaluate("() => { harness.tracker.optOut(); harness.tracker.forget(); }")
    await no_escaped_errors(page)


async def test_a_bad_base_url_fails_quietly_and_gives_up(page: Page) -> None:
    await page.goto("/healthz")
    await page.evaluate(
        """async () => {
            window.escaped = 0;
            window.addEventListener("unhandledrejection", () => (window.escaped += 1));
            const { createTracker } = await import("/static/pin-tracker.js");
            window.bad = createTracker({ baseUrl: "http://[not a host", retryBaseMs: 1,
                                         retryMaxMs: 2, maxAttempts: 3, autoStart: false });
        }"""
    )
    assert await page.evaluate("() => bad.start()") is None
    assert await page.evaluate("() => bad.track('x')") is None
    assert await page.evaluate("() => bad.stats.dropped") == 2
    await no_escaped_errors(page)


async def test_a_clock_set_back_never_makes_an_idle_page_send_heartbeats(page: Page) -> None:
    await harness(page, [])
    await page.evaluate(
        """() => { window.clock = 10_000_000;
                   window.idle = harness.make({ autoStart: true, now: () => clock,
                                                heartbeatIntervalMs: 10,
                                                interactionWindowMs: 1000 }); }"""
    )
    await page.wait_for_function("() => idle.sessionId")
    await page.evaluate(
        """() => { harness.win.dispatchEvent(new Event("pointerdown"));
                   window.clock -= 3_600_000; }"""  # used, then the clock is set back an hour
    )
    ticks = await page.evaluate("() => idle.stats.ticks")
    await page.wait_for_function("n => idle.stats.ticks >= n + 5", arg=ticks)
    assert await page.evaluate("() => idle.stats.heartbeats") == 0
    await no_escaped_errors(page)


async def test_data_json_cannot_carry_is_refused_at_once_without_a_page_error(
    page: Page,
) -> None:
    await harness(page, [])
    refused = await page.evaluate(
        """() => { const cycle = {}; cycle.self = cycle;
                   return Promise.all([harness.tracker.track("cycle", cycle),
                                       harness.tracker.track("big", { n: 1n })]); }"""
    )
    assert refused == [None, None]
    assert await calls(page, "path") == []
    await no_escaped_errors(page)

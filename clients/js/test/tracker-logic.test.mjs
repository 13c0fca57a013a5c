// The tracker's queue, backoff, consent and identity rules, unit-tested under `node --test`.
//
// The module under test is the very file the API serves (the esbuild output the packaging test
// keeps equal to src/); only its surroundings are replaced: a scripted `fetch`, a storage the
// test reads (or makes throw), a window whose `navigator` the test sets and a document that is
// always visible. So each rule is checked exactly (which request, how often, in which order)
// without a browser and without waiting on timers longer than a few milliseconds. What needs
// the page itself (tabs, visibility, reloads, other origins) is tested in Chromium.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { afterEach, beforeEach, test } from "node:test";

const SERVED = new URL("../../../src/pin_sessions/web/static/pin-tracker.js", import.meta.url);
// Imported from a data: URL, an ES module whatever the directory says, so any Node version
// with a test runner loads the served file as the browser does.
const { createTracker, retryDelay } = await import(
  `data:text/javascript;base64,${readFileSync(SERVED).toString("base64")}`
);

const DEVICE = "6f1c7a52-2b1e-4c8d-9a0f-3e5d7b9c1a22";
const VIEWED = "0b7f8c3e-6a52-4c1e-9d1a-5f0c2a7e4b11";
const START = "/api/user-activity/sessions/start";
const ACTIONS = "/api/user-activity/actions";
const WAIT_MS = 20_000;

// Errors that reach the host page would be unhandled here: the tracker must never let one out.
let escaped = 0;
process.on("unhandledRejection", () => (escaped += 1));
process.on("uncaughtException", () => (escaped += 1));

// The tracker's timers never hold a process open, so a case awaiting a retry would see
// Node's event loop run dry; Jest and Vitest keep theirs alive with a test timeout, this file
// with a timer of its own while each case runs.
let keepAlive;
beforeEach(() => {
  keepAlive = setInterval(() => {}, 1_000);
});

let made = [];
afterEach(() => {
  clearInterval(keepAlive);
  for (const tracker of made) tracker.stop();
  made = [];
});

/** A tracker wired to fakes; `make()` builds another one on the same device (a page load). */
function harness(
  responses,
  { online = true, navigator = {}, stored = { "pin.anonymousId": DEVICE }, brokenStorage = false, ...options } = {},
) {
  escaped = 0;
  const calls = [];
  const script = [...responses];
  const fetch = async (url, init) => {
    const call = {
      path: new URL(url, "http://127.0.0.1/").pathname,
      body: init.body ?? null,
      anonymousId: init.headers["X-Anonymous-Id"] ?? null,
      key: init.headers["Idempotency-Key"] ?? null,
      keepalive: !!init.keepalive,
      signal: init.signal ?? null,
      // What the service issues to a start without X-Anonymous-Id.
      issued: init.headers["X-Anonymous-Id"] ?? crypto.randomUUID(),
    };
    calls.push(call);
    const next = script.length ? script.shift() : 200;
    if (next === "network") throw new TypeError("Failed to fetch");
    if (next === "hang") {
      // A request that never answers: only an abort ends it, as in a browser.
      return new Promise((_, reject) =>
        init.signal?.addEventListener("abort", () => reject(new DOMException("aborted", "AbortError"))),
      );
    }
    if (next === "html") return new Response("<html>hello</html>", { status: 200 });
    const n = calls.length;
    const payload = { sessionId: "s-1", anonymousId: call.issued, actionId: `x-${n}`, viewId: `v-${n}` };
    return new Response(JSON.stringify(payload), { status: next });
  };
  const win = new EventTarget();
  win.navigator = { onLine: online, ...navigator };
  win.crypto = globalThis.crypto;
  const doc = new EventTarget();
  doc.visibilityState = "visible";
  const memory = new Map(Object.entries(stored));
  const denied = () => {
    throw new Error("denied");
  };
  const storage = brokenStorage
    ? {
        getItem: denied,
        setItem: denied,
        removeItem: denied,
        key: denied,
        get length() {
          return denied();
        },
      }
    : {
        getItem: (key) => memory.get(key) ?? null,
        setItem: (key, value) => memory.set(key, String(value)),
        removeItem: (key) => memory.delete(key),
        key: (index) => [...memory.keys()][index] ?? null,
        get length() {
          return memory.size;
        },
      };
  const make = (more = {}) => {
    const tracker = createTracker({
      fetch, window: win, document: doc, storage, indexedDB: null, autoStart: false,
      random: () => 1, retryBaseMs: 5, retryMaxMs: 20, ...options, ...more,
    });
    made.push(tracker);
    return tracker;
  };
  return {
    tracker: make(),
    make,
    calls,
    win,
    /** What the scripted fetch was asked, one field (or a list of fields) per call. */
    sent: (...fields) =>
      calls.map((call) => (fields.length === 1 ? call[fields[0]] : fields.map((field) => call[field]))),
    stored: () => Object.fromEntries(memory),
    goOnline() {
      win.navigator.onLine = true;
      win.dispatchEvent(new Event("online"));
    },
  };
}

/** Until `condition()` holds; fails after WAIT_MS, as a browser wait would. */
async function until(condition) {
  const deadline = Date.now() + WAIT_MS;
  while (!condition()) {
    if (Date.now() > deadline) assert.fail(`not within ${WAIT_MS} ms: ${condition}`);
    await sleep(2);
  }
}

function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

test("a failed delivery is retried and each item is sent once after success", async () => {
  const h = harness(["network", 201, 201, 201]);
  const results = await Promise.all(["a", "b", "c"].map((type) => h.tracker.track(type)));
  // The head of the queue is retried until accepted; nothing overtakes it, nothing repeats.
  assert.deepEqual(h.sent("body").map((body) => JSON.parse(body).type), ["a", "a", "b", "c"]);
  const keys = h.sent("key");
  // A retry is the same item: same Idempotency-Key, so the API records it once.
  assert.equal(keys[0], keys[1]);
  assert.equal(new Set(keys).size, 3);
  assert.deepEqual(results.map((result) => result.actionId), ["x-2", "x-3", "x-4"]);
  const stats = h.tracker.stats;
  assert.equal(stats.retries, 1);
  assert.equal(stats.delivered, 3);
  assert.equal(stats.pending, 0);
});

test("a refused item is dropped without retry", async () => {
  const h = harness([422, 201]);
  const results = await Promise.all([h.tracker.track("bad"), h.tracker.track("good")]);
  assert.equal(results[0], null);
  assert.equal(results[1].actionId, "x-2");
  assert.equal(h.calls.length, 2);
});

test("retry delays grow exponentially up to the cap", () => {
  const highest = [0, 1, 2, 3, 4, 10].map((n) => retryDelay(n, 1000, 60000, () => 1));
  const lowest = [0, 1, 2, 3].map((n) => retryDelay(n, 1000, 60000, () => 0));
  assert.deepEqual(highest, [1000, 2000, 4000, 8000, 16000, 60000]);
  assert.deepEqual(lowest, [500, 1000, 2000, 4000]);
});

test("a full offline queue drops the oldest action but keeps the start", async () => {
  const h = harness([], { online: false, maxQueueSize: 3 });
  const results = [];
  h.tracker.start();
  for (const type of ["a", "b", "c"]) {
    h.tracker.track(type).then((result) => results.push([type, result]));
  }
  await until(() => results.length === 1);
  assert.deepEqual(results, [["a", null]]);
  const stats = h.tracker.stats;
  assert.deepEqual([stats.pending, stats.dropped], [3, 1]);
  assert.equal(h.calls.length, 0);

  // Back online: the start goes first, then what is left, each once.
  h.goOnline();
  await until(() => h.tracker.pending === 0);
  assert.deepEqual(h.sent("path"), [START, ACTIONS, ACTIONS]);
});

test("items queued before a reset keep the identity they happened under", async () => {
  const h = harness([], { online: false });
  h.tracker.start();
  h.tracker.track("before");
  h.tracker.reset();
  h.goOnline();
  await until(() => h.tracker.pending === 0 && h.tracker.anonymousId);
  const fresh = h.tracker.anonymousId;
  assert.notEqual(fresh, DEVICE);
  assert.deepEqual(h.sent("path", "anonymousId"), [
    [START, DEVICE],
    [ACTIONS, DEVICE],
    [START, null], // the service issues the new identity...
  ]);
  assert.equal(h.calls[2].issued, fresh); // ...and the tracker keeps it
  assert.equal(h.stored()["pin.anonymousId"], fresh);
});

test("the first start sends no id but an Idempotency-Key, kept across retries and reloads", async () => {
  const h = harness(["network", 503, "network", 200], { stored: {}, maxAttempts: 2 });
  assert.equal(await h.tracker.start(), null); // two tries, then given up on this page
  const key = h.stored()["pin.startKey"];
  assert.match(key, /^[\x21-\x7e]{1,64}$/); // 1-64 printable ASCII characters
  // The page is reloaded before any answer came: the next page's start has the same key.
  h.tracker.stop();
  const next = h.make();
  const started = await next.start();
  assert.deepEqual(h.sent("path", "anonymousId", "key"), [
    [START, null, key],
    [START, null, key],
    [START, null, key],
    [START, null, key],
  ]);
  // The service's id is the device's from now on, and the key is spent.
  const issued = h.calls[3].issued;
  assert.equal(started.anonymousId, issued);
  assert.equal(next.anonymousId, issued);
  assert.equal(h.stored()["pin.anonymousId"], issued);
  assert.ok(!("pin.startKey" in h.stored()));
  await next.track("after");
  assert.deepEqual(h.sent("path", "anonymousId").slice(4), [[ACTIONS, issued]]);
});

test("a device holding an id of its own (an older tracker's) keeps sending it", async () => {
  const h = harness([]);
  await h.tracker.start();
  assert.deepEqual(h.sent("path", "anonymousId", "key"), [[START, DEVICE, null]]);
  assert.equal(h.stored()["pin.anonymousId"], DEVICE);
});

test("a corrupted stored id is never sent: the service issues a new one", async () => {
  const h = harness([], { stored: { "pin.anonymousId": "garbage" } });
  await h.tracker.start();
  assert.deepEqual(h.sent("anonymousId"), [null]);
  assert.equal(h.tracker.anonymousId, h.calls[0].issued);
});

test("actions tracked before the device has an id wait for the start that gets one", async () => {
  const h = harness([], { stored: {} });
  const tracked = h.tracker.track("early");
  await h.tracker.start();
  assert.ok(await tracked);
  const issued = h.calls[0].issued;
  assert.deepEqual(h.sent("path", "anonymousId"), [
    [START, null],
    [ACTIONS, issued],
  ]);
});

test("after stop() no request leaves: retries end and a request in flight is aborted", async () => {
  const h = harness(Array(20).fill("network"), { maxAttempts: 20 });
  h.tracker.start();
  await until(() => h.calls.length >= 2);
  h.tracker.stop();
  const sent = h.calls.length;
  await sleep(100); // five times the longest retry delay
  assert.equal(h.calls.length, sent);
  assert.equal(h.tracker.status, "stopped");

  const hung = harness(["hang"]);
  hung.tracker.start();
  await until(() => hung.calls.length === 1);
  hung.tracker.stop();
  assert.equal(hung.calls[0].signal?.aborted, true);
  await sleep(100);
  assert.equal(hung.calls.length, 1);
  assert.equal(escaped, 0);
});

test("disabled: status disabled, nothing sent or stored, every method resolving null", async () => {
  const h = harness([], { stored: {}, disabled: true, autoStart: true });
  const tracker = h.tracker;
  assert.equal(tracker.status, "disabled");
  assert.equal(await tracker.start(), null);
  assert.equal(await tracker.track("x"), null);
  assert.equal(await tracker.viewStart(VIEWED), null);
  assert.equal(await tracker.link("token"), null);
  tracker.optIn();
  assert.equal(await tracker.reset(), null);
  assert.equal(tracker.status, "disabled");
  assert.deepEqual(h.sent("path"), []);
  assert.deepEqual(h.stored(), {});
});

test("onStatus reports the status at once and then each change", () => {
  const h = harness([]);
  const seen = [];
  const unsubscribe = h.tracker.onStatus((status) => seen.push(status));
  h.tracker.start();
  h.tracker.optOut();
  h.tracker.optIn();
  h.tracker.stop();
  h.tracker.stop(); // no change, no report
  assert.deepEqual(seen, ["stopped", "tracking", "opted-out", "tracking", "stopped"]);
  unsubscribe();
  h.tracker.start();
  assert.equal(seen.length, 5);
  // A listener that throws is the page's bug, never the tracker's undoing.
  h.tracker.onStatus((status) => {
    if (status === "stopped") throw new Error("listener");
  });
  h.tracker.stop();
  assert.equal(h.tracker.status, "stopped");
});

test("debug logs decisions and names CORS as the likely cause of a cross-origin failure", async (t) => {
  const logged = [];
  for (const level of ["info", "warn"]) {
    t.mock.method(console, level, (...args) => logged.push(`${level} ${args.join(" ")}`));
  }
  const page = { href: "https://shop.example/basket", origin: "https://shop.example" };
  const h = harness(["network", 503], { debug: true, maxAttempts: 2, baseUrl: "https://sessions.example" });
  h.win.location = page;
  await h.tracker.start();
  const text = logged.join("\n");
  assert.match(text, /info .*status: tracking/);
  assert.match(text, /warn .*https:\/\/shop\.example.*PIN_HTTP__CORS_ORIGINS/);
  assert.match(text, /warn .*503/);
  assert.match(text, /warn .*dropped/);

  // Quiet without debug; and a failure on the page's own origin does not blame CORS.
  logged.length = 0;
  const quiet = harness(["network"], { maxAttempts: 1, baseUrl: "https://sessions.example" });
  quiet.win.location = page;
  await quiet.tracker.start();
  assert.deepEqual(logged, []);
  const same = harness(["network"], { debug: true, maxAttempts: 1, baseUrl: "https://shop.example" });
  same.win.location = page;
  await same.tracker.start();
  assert.ok(logged.some((line) => line.startsWith("warn")));
  assert.ok(!logged.join("\n").includes("CORS"));
});

test("with consent required nothing is sent or stored until consent", async () => {
  const h = harness([], { stored: {}, requireConsent: true, autoStart: true });
  assert.equal(await h.tracker.track("before-consent"), null);
  assert.equal(h.tracker.status, "no-consent");
  assert.deepEqual(h.sent("path"), []);
  assert.deepEqual(h.stored(), {});

  h.tracker.consent(true);
  await until(() => h.tracker.sessionId);
  assert.deepEqual(h.sent("path"), [START]);
  assert.equal(h.stored()["pin.consent"], "granted");
  assert.equal(h.tracker.status, "tracking");
});

test("opting out forgets the device and is remembered until opting in", async () => {
  const h = harness([], { online: false });
  h.tracker.start();
  h.tracker.track("queued");
  assert.ok(Object.keys(h.stored()).some((key) => key.startsWith("pin.q.")));

  h.tracker.optOut();
  assert.deepEqual(h.stored(), { "pin.optOut": "1" });
  // The next page load of this device: still opted out, nothing sent.
  h.goOnline();
  const next = h.make({ autoStart: true });
  assert.equal(next.status, "opted-out");
  assert.equal(await next.track("after"), null);
  assert.deepEqual(h.sent("path"), []);

  next.optIn();
  await until(() => next.sessionId);
  assert.deepEqual(h.sent("path"), [START]);
  assert.ok(!("pin.optOut" in h.stored()));
});

for (const [name, navigator] of [
  ["dnt", { doNotTrack: "1" }],
  ["gpc", { globalPrivacyControl: true }],
]) {
  test(`do not track and global privacy control are respected by default [${name}]`, async () => {
    const h = harness([], { stored: {}, navigator, autoStart: true });
    assert.equal(await h.tracker.track("x"), null);
    assert.equal(h.tracker.status, "do-not-track");
    assert.deepEqual(h.sent("path"), []);
    assert.deepEqual(h.stored(), {});
    // A site that does not honour the signal says so explicitly.
    const other = h.make({ respectDoNotTrack: false });
    assert.ok(await other.start());
  });
}

test("forget stops and removes every stored id and queued item", async () => {
  const h = harness([], { online: false });
  h.tracker.start();
  h.tracker.track("a");
  h.tracker.viewStart(VIEWED);
  h.tracker.forget();
  assert.deepEqual(h.stored(), {});
  assert.deepEqual([h.tracker.anonymousId, h.tracker.pending], [null, 0]);
  h.goOnline();
  assert.equal(await h.tracker.track("after"), null);
  assert.deepEqual(h.sent("path"), []);
});

test("the queue survives a page load and is sent once with its keys", async () => {
  const h = harness([], { online: false });
  h.tracker.start();
  h.tracker.track("a");
  h.tracker.viewStart(VIEWED);
  h.tracker.viewEnd();
  h.tracker.stop();
  const queued = new Map(
    Object.entries(h.stored())
      .filter(([name]) => name.startsWith("pin.q."))
      .map(([, value]) => [JSON.parse(value).key, JSON.parse(value)]),
  );
  const kinds = [...queued.values()].sort((a, b) => a.seq - b.seq).map((item) => item.kind);
  assert.deepEqual(kinds, ["action", "viewStart", "viewEnd"]);

  // The page is gone; the next one finds the queue and delivers it, in order, each once.
  h.goOnline();
  const next = h.make({ autoStart: true });
  await until(() => next.sessionId && next.pending === 0);
  const sent = h.sent("path", "key");
  assert.deepEqual(sent.map(([path]) => path), [
    START,
    ACTIONS,
    "/api/user-activity/property-views",
    "/api/user-activity/property-views/v-3/end",
  ]);
  const [action, view] = sent.slice(1, 3).map(([, key]) => key);
  assert.ok(queued.has(action) && queued.has(view));
  assert.notEqual(action, view);
  assert.ok(!Object.keys(h.stored()).some((name) => name.startsWith("pin.q.")));
});

test("stored items are bounded and the oldest go first", () => {
  const h = harness([], { online: false, maxQueueSize: 4 });
  h.tracker.start();
  for (let n = 0; n < 10; n++) h.tracker.track(`t${n}`);
  const bodies = Object.entries(h.stored())
    .filter(([name]) => name.startsWith("pin.q."))
    .map(([, value]) => JSON.parse(value).body.type);
  assert.deepEqual(bodies.sort(), ["t7", "t8", "t9"]); // the start holds the fourth place
  assert.equal(h.tracker.stats.dropped, 7);
});

test("hiding the page sends the queue with keepalive", async () => {
  // The first try fails and its retry waits 10 s: only the hiding can send now.
  const h = harness([201, "network"], { retryBaseMs: 20_000, retryMaxMs: 20_000 });
  await h.tracker.start();
  h.tracker.track("a");
  h.tracker.track("b");
  await until(() => h.calls.length === 2);
  h.win.dispatchEvent(new Event("pagehide"));
  await until(() => h.tracker.pending === 0);
  const sent = h.sent("path", "keepalive", "key");
  assert.deepEqual(sent.map(([, keepalive]) => keepalive), [false, false, true, true]);
  assert.equal(sent[1][2], sent[2][2]); // the failed one again, under its key
  assert.equal(escaped, 0);
});

for (const answer of [500, "html", "network"]) {
  test(`a broken server costs a bounded number of tries and no page error [${answer}]`, async () => {
    const h = harness(Array(50).fill(answer), { maxAttempts: 4 });
    assert.equal(await h.tracker.track("x"), null);
    const tries = answer === "html" ? 1 : 4; // a 200 that is not the API's answer: never retried
    assert.equal(h.calls.length, tries);
    await sleep(100); // twenty times the longest retry delay: nothing more
    assert.equal(h.calls.length, tries);
    assert.equal(escaped, 0);
  });
}

test("storage that throws leaves the tracker working in memory", async () => {
  const h = harness([], { brokenStorage: true, autoStart: true });
  await until(() => h.tracker.sessionId);
  assert.ok(await h.tracker.track("x"));
  h.tracker.optOut();
  h.tracker.forget();
  assert.equal(escaped, 0);
});

test("a bad base URL fails quietly and gives up", async () => {
  escaped = 0;
  // The runtime's own fetch, which refuses the URL as a browser's does; a bare window and
  // document of the test's own, since outside a browser the tracker is inert.
  const win = new EventTarget();
  win.navigator = { onLine: true };
  win.crypto = globalThis.crypto;
  const doc = new EventTarget();
  doc.visibilityState = "visible";
  const bad = createTracker({
    window: win, document: doc, indexedDB: null,
    baseUrl: "http://[not a host", retryBaseMs: 1, retryMaxMs: 2, maxAttempts: 3, autoStart: false,
  });
  made.push(bad);
  assert.equal(await bad.start(), null);
  assert.equal(await bad.track("x"), null);
  // The start, the start tried again for the action (no id, nothing can go without one),
  // the action.
  assert.equal(bad.stats.dropped, 3);
  assert.equal(escaped, 0);
});

test("a clock set back never makes an idle page send heartbeats", async () => {
  const h = harness([]);
  let clock = 10_000_000;
  const idle = h.make({
    autoStart: true, now: () => clock, heartbeatIntervalMs: 10, interactionWindowMs: 1000,
  });
  await until(() => idle.sessionId);
  h.win.dispatchEvent(new Event("pointerdown"));
  clock -= 3_600_000; // used, then the clock is set back an hour
  const ticks = idle.stats.ticks;
  await until(() => idle.stats.ticks >= ticks + 5);
  assert.equal(idle.stats.heartbeats, 0);
  assert.equal(escaped, 0);
});

test("a mousemove that moved nothing is not use; one that moved is", async () => {
  // Chromium sends the first kind when a page lays out under a resting pointer.
  const h = harness([]);
  const clock = 1_000;
  const page = h.make({
    autoStart: true, now: () => clock, heartbeatIntervalMs: 10, interactionWindowMs: 1000,
  });
  await until(() => page.sessionId);
  h.win.dispatchEvent(Object.assign(new Event("mousemove"), { movementX: 0, movementY: 0 }));
  const ticks = page.stats.ticks;
  await until(() => page.stats.ticks >= ticks + 5);
  assert.equal(page.stats.heartbeats, 0);
  h.win.dispatchEvent(Object.assign(new Event("mousemove"), { movementX: 0, movementY: -3 }));
  await until(() => page.stats.heartbeats >= 1);
  assert.equal(escaped, 0);
});

test("where the browser reports no movement at all, every mousemove is use", async () => {
  const h = harness([]);
  const page = h.make({
    autoStart: true, now: () => 1_000, heartbeatIntervalMs: 10, interactionWindowMs: 1000,
  });
  await until(() => page.sessionId);
  h.win.dispatchEvent(new Event("mousemove")); // no movementX, no movementY
  await until(() => page.stats.heartbeats >= 1);
  assert.equal(escaped, 0);
});

test("data JSON cannot carry is refused at once without a page error", async () => {
  const h = harness([]);
  const cycle = {};
  cycle.self = cycle;
  const refused = await Promise.all([h.tracker.track("cycle", cycle), h.tracker.track("big", { n: 1n })]);
  assert.deepEqual(refused, [null, null]);
  assert.deepEqual(h.sent("path"), []);
  assert.equal(escaped, 0);
});

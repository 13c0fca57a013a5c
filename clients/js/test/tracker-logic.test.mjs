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
import { afterEach, test } from "node:test";

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

let made = [];
afterEach(() => {
  for (const tracker of made) tracker.stop(); // its timers would keep the test process alive
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
    calls.push({
      path: new URL(url, "http://127.0.0.1/").pathname,
      body: init.body ?? null,
      anonymousId: init.headers["X-Anonymous-Id"] ?? null,
      key: init.headers["Idempotency-Key"] ?? null,
      keepalive: !!init.keepalive,
    });
    const next = script.length ? script.shift() : 200;
    if (next === "network") throw new TypeError("Failed to fetch");
    if (next === "html") return new Response("<html>hello</html>", { status: 200 });
    const n = calls.length;
    const payload = { sessionId: "s-1", actionId: `x-${n}`, viewId: `v-${n}` };
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
  await until(() => h.tracker.pending === 0);
  const fresh = h.tracker.anonymousId;
  assert.notEqual(fresh, DEVICE);
  assert.deepEqual(h.sent("path", "anonymousId"), [
    [START, DEVICE],
    [ACTIONS, DEVICE],
    [START, fresh], // the new identity, made on the device
  ]);
  assert.equal(h.stored()["pin.anonymousId"], fresh);
});

test("the anonymous id is made before the first start and retries keep it", async () => {
  const h = harness(["network", 503, 200], { stored: {} });
  await h.tracker.start();
  const sent = h.sent("path", "anonymousId");
  assert.deepEqual(sent.map(([path]) => path), [START, START, START]);
  const ids = new Set(sent.map(([, anonymousId]) => anonymousId));
  assert.equal(ids.size, 1);
  const [device] = ids;
  assert.match(device, /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  assert.equal(h.stored()["pin.anonymousId"], device);
});

test("a corrupted stored id is replaced before anything is sent", async () => {
  const h = harness([], { stored: { "pin.anonymousId": "garbage" } });
  await h.tracker.start();
  const [device, ...more] = h.sent("anonymousId");
  assert.deepEqual(more, []);
  assert.ok(device !== null && device !== "garbage");
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
  assert.equal(bad.stats.dropped, 2);
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

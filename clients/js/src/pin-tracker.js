// PIN user-activity tracker: a dependency-free ES module for the browser.
//
// Its first start asks the service for the device's AnonymousId (the start carries an
// Idempotency-Key instead, kept until the answer comes), starts the user-activity Session, keeps it
// alive with heartbeats while a person is actually using the page, and delivers actions and
// property views through a durable, bounded queue, each item with its own Idempotency-Key.
// Nothing is sent or stored while the visitor has not consented (when consent is required),
// opted out, or asked not to be tracked. The HTTP contract is the service's
// `/api/user-activity/*` API; no error of the tracker ever escapes to the host page.
//
// Outside a browser (Node, server-side rendering: no `window`, none given) a tracker is
// inert: status "no-browser", nothing sent or stored, no timer held, every method resolving
// null. Tests and other hosts pass `window` (with `document` and `fetch`) to run it there.
// `disabled: true` makes it inert anywhere (status "disabled"), for unit tests under jsdom.
// Its timers never keep a Node process alive, and `stop()` ends every timer, retry and
// request in flight.

const API = "/api/user-activity";
const ID_KEY = "pin.anonymousId";
const CONSENT_KEY = "pin.consent";
const OPT_OUT_KEY = "pin.optOut";
// The Idempotency-Key of the first start, until its answer brings the AnonymousId: a start
// retried (also by the next page) after a lost answer gets the same id and session.
const START_KEY = "pin.startKey";
// One storage entry per queued item, so tabs never overwrite each other's queue.
const QUEUE_PREFIX = "pin.q.";
const COOKIE_NAME = "pin_anonymous_id";
const COOKIE_MAX_AGE_SECONDS = 2 * 365 * 24 * 60 * 60;
// Serialises the first start across tabs, so tabs opened at once share one id (and so one
// Session): one tab asks, the others read its answer.
const DEVICE_LOCK = "pin-tracker:anonymous-id";
// localStorage reaches other tabs asynchronously, so the lock holder writes the id and the
// start's key to IndexedDB too, which every tab reads consistently.
const SHARED_DB = { name: "pin-tracker", store: "device" };
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const INTERACTION_EVENTS = ["pointerdown", "keydown", "wheel", "touchstart", "scroll", "mousemove"];
// What survives a page load: actions and views, never a start or a link (it holds a token).
const DURABLE = new Set(["action", "viewStart", "viewEnd"]);

const DEFAULTS = {
  baseUrl: "",
  heartbeatIntervalMs: 60_000,
  interactionWindowMs: 60_000,
  retryBaseMs: 1_000,
  retryMaxMs: 60_000,
  maxAttempts: 10,
  maxQueueSize: 100,
  autoStart: true,
  requireConsent: false,
  respectDoNotTrack: true,
  disabled: false,
  debug: false,
};

/** Statuses worth retrying; any other 4xx would fail the same way forever. */
function isRetryable(status) {
  return status === 408 || status === 425 || status === 429 || status >= 500;
}

/**
 * Delay before retry number `attempt` (0-based): exponential up to `maxMs`, with "equal
 * jitter" (at least half the ceiling), so devices coming back online at once spread out.
 */
export function retryDelay(attempt, baseMs, maxMs, random = Math.random) {
  const ceiling = Math.min(maxMs, baseMs * 2 ** attempt);
  return ceiling / 2 + random() * (ceiling / 2);
}

/** A timer that never keeps a Node (or jsdom) process alive; browsers have no such notion. */
function unref(timer) {
  timer?.unref?.();
  return timer;
}

/** Create a tracker; with `autoStart` (the default) the session starts at once, if allowed. */
export function createTracker(options = {}) {
  return new Tracker(options);
}

export class Tracker {
  #options;
  #fetch;
  #now;
  #random;
  #window;
  #document;
  #store;
  #shared;
  #anonymousId = null;
  #sessionId = null;
  #userId = null;
  #queue = [];
  #seq = 0;
  #flushing = false;
  #retryTimer = null;
  #heartbeatTimer = null;
  #running = false;
  #halted = false;
  #restored = false;
  #startPromise = null;
  #lastInteractionAt = Number.NEGATIVE_INFINITY;
  #lastHeartbeatAt = Number.NEGATIVE_INFINITY;
  #finalHeartbeatSent = false;
  #view = null;
  #inert;
  #abort = new AbortController();
  #reported;
  #statusListeners = new Set();
  #listeners = [];
  #stats = { ticks: 0, heartbeats: 0, finalHeartbeats: 0, delivered: 0, dropped: 0, retries: 0 };

  constructor(options = {}) {
    this.#options = { ...DEFAULTS, ...options };
    const win = (this.#window = options.window ?? globalThis.window);
    // No page to watch: a session started here would be a server's, kept alive by a timer.
    this.#inert = !win || !!this.#options.disabled;
    this.#document = options.document ?? globalThis.document;
    const fetch = options.fetch ?? globalThis.fetch;
    this.#fetch = fetch ? (url, init) => fetch.call(globalThis, url, init) : null;
    // Monotonic: a wall clock set back would make an idle page look busy for hours.
    this.#now = options.now ?? (() => globalThis.performance?.now() ?? Date.now());
    this.#random = options.random ?? Math.random;
    const storage = options.storage === undefined ? localStorageOf(win) : options.storage;
    this.#store = new Store(this.#inert ? null : storage);
    const indexedDB = options.indexedDB === undefined ? win?.indexedDB : options.indexedDB;
    this.#shared = new SharedDeviceId(this.#inert ? null : indexedDB);
    if (this.#allowed()) this.#anonymousId = this.#readId();
    this.#emit();
    if (this.#options.autoStart) this.start();
  }

  /** The device's AnonymousId, shared by every tab; null until it is known. */
  get anonymousId() {
    return this.#anonymousId;
  }

  /** The current Session's id, as the API last reported it. */
  get sessionId() {
    return this.#sessionId;
  }

  /** The user the session is linked to, once `link()` succeeded. */
  get userId() {
    return this.#userId;
  }

  /** Items waiting for delivery (start, actions, views, link). */
  get pending() {
    return this.#queue.length;
  }

  /** "tracking", "stopped", "opted-out", "no-consent", "do-not-track", "disabled" or "no-browser". */
  get status() {
    if (this.#options.disabled) return "disabled";
    if (this.#inert) return "no-browser";
    if (this.#store.get(OPT_OUT_KEY)) return "opted-out";
    if (!this.#allowed()) {
      return this.#consent() === "denied" || this.#options.requireConsent ? "no-consent" : "do-not-track";
    }
    return this.#running ? "tracking" : "stopped";
  }

  /** Counters for diagnostics and tests. */
  get stats() {
    return { ...this.#stats, pending: this.#queue.length };
  }

  /** Start (or resume) the device's session. Idempotent; called on load by default. */
  start() {
    if (!this.#allowed()) return Promise.resolve(null);
    if (this.#running && this.#startPromise) return this.#startPromise;
    this.#running = true;
    this.#halted = false;
    if (this.#abort.signal.aborted) this.#abort = new AbortController();
    this.#listen();
    this.#startPromise = this.#enqueue({ kind: "start" });
    this.#heartbeatTimer ??= unref(
      setInterval(() => this.#guard(() => this.#tick()), this.#options.heartbeatIntervalMs),
    );
    this.#restore();
    this.#emit();
    return this.#startPromise;
  }

  /** Calls `callback(status)` now and on every change of `status`; returns an unsubscribe. */
  onStatus(callback) {
    this.#statusListeners.add(callback);
    this.#guard(() => callback(this.status));
    return () => this.#statusListeners.delete(callback);
  }

  /** Record an action; resolves with `{actionId, sessionId}`, or null if it was dropped. */
  track(type, data = undefined, { propertyObjectId } = {}) {
    const body = { type };
    if (propertyObjectId !== undefined) body.propertyObjectId = propertyObjectId;
    if (data !== undefined) body.data = data;
    return this.#enqueue({ kind: "action", body });
  }

  /** Begin viewing a property object; an open view is ended first. */
  viewStart(propertyObjectId) {
    if (this.#view) this.viewEnd();
    const item = { kind: "viewStart", body: { propertyObjectId } };
    const started = this.#enqueue(item);
    if (item.key) this.#view = { key: item.key, viewId: null };
    return started;
  }

  /** End the open view; resolves with `{viewId, durationSeconds}`, or null without one. */
  viewEnd() {
    const view = this.#view;
    this.#view = null;
    if (!view) return Promise.resolve(null);
    return this.#enqueue({ kind: "viewEnd", viewKey: view.key, viewId: view.viewId });
  }

  /** Link the device's session to the user who just signed in (access token of that user). */
  link(accessToken) {
    return this.#enqueue({ kind: "link", accessToken });
  }

  /**
   * On sign-out: a new AnonymousId, so what happens next on this device is not attributed
   * to the user who left, and a fresh guest session. Other tabs follow through `storage`.
   */
  reset() {
    if (!this.#allowed()) return Promise.resolve(null);
    this.#view = this.#userId = this.#sessionId = null;
    // A new start key before the id goes, so other tabs read the removal as a reset, not a
    // forget; the service issues the new id to the start below.
    this.#store.set(START_KEY, newId(this.#window));
    this.#dropId();
    this.#running = false;
    return this.start();
  }

  /** The visitor consents (or not) to being tracked; remembered on this device. */
  consent(granted) {
    this.#store.set(CONSENT_KEY, granted ? "granted" : "denied");
    if (!granted) return this.#halt(true);
    if (this.#options.autoStart) this.start();
  }

  /** The visitor opts out: nothing more is sent, every stored id is removed. Remembered. */
  optOut() {
    this.#store.set(OPT_OUT_KEY, "1");
    this.#halt(true);
  }

  /** The visitor opts back in (this also counts as consent) and tracking starts. */
  optIn() {
    this.#store.del(OPT_OUT_KEY);
    this.#store.set(CONSENT_KEY, "granted");
    this.start();
  }

  /** Stop, and remove every id and queued item this tracker stored on the device. */
  forget() {
    this.#halt(true);
  }

  /**
   * Stop: timers, retries and requests in flight end, and nothing is sent until `start()`.
   * Queued items stay (stored ones are sent on a later load).
   */
  stop() {
    this.#halted = true;
    this.#abort.abort();
    clearInterval(this.#heartbeatTimer);
    clearTimeout(this.#retryTimer);
    this.#heartbeatTimer = this.#retryTimer = null;
    this.#running = false;
    for (const [target, type, handler, opts] of this.#listeners) {
      target.removeEventListener(type, handler, opts);
    }
    this.#listeners = [];
    this.#emit();
  }

  /** Deliver queued items now (also runs by itself on `online` and after each backoff). */
  flush() {
    clearTimeout(this.#retryTimer);
    this.#retryTimer = null;
    return this.#flush();
  }

  // --- consent ---------------------------------------------------------------------------

  #consent() {
    return this.#store.get(CONSENT_KEY);
  }

  /** An explicit "granted" wins over Do-Not-Track; an opt-out wins over everything. */
  #allowed() {
    if (this.#inert) return false;
    if (this.#store.get(OPT_OUT_KEY)) return false;
    const consent = this.#consent();
    if (consent) return consent === "granted";
    if (this.#options.requireConsent) return false;
    return !(this.#options.respectDoNotTrack && doNotTrack(this.#window));
  }

  #halt(erase) {
    this.stop();
    this.#halted = true;
    for (const item of this.#queue.splice(0)) item.resolve?.(null);
    this.#anonymousId = this.#sessionId = this.#userId = this.#view = null;
    if (!erase) return;
    // The start key first: other tabs then read the id's removal as a forget.
    this.#store.del(START_KEY);
    this.#shared.write(START_KEY, null);
    this.#dropId();
    for (const name of this.#store.keys()) if (name.startsWith(QUEUE_PREFIX)) this.#store.del(name);
  }

  // --- queue ---------------------------------------------------------------------------

  #enqueue(item) {
    return new Promise((resolve) => {
      if (!this.#allowed() || this.#halted) return resolve(null);
      if (item.body !== undefined) {
        try {
          JSON.stringify(item.body);
        } catch {
          return resolve(null); // data JSON cannot carry (a cycle, a BigInt): refused at once
        }
      }
      item.resolve = resolve;
      // Items belong to the device identity current when they happened, even if `reset()`
      // replaces it before they are delivered.
      item.anonymousId = this.#anonymousId;
      item.key = newId(this.#window);
      item.seq = this.#seq = Math.max(Date.now(), this.#seq + 1);
      item.attempts = 0;
      // Nothing goes without an id: a tracking page whose start was given up asks again.
      if (item.kind !== "start" && !item.anonymousId && this.#running && !this.#queue.some((queued) => queued.kind === "start")) {
        this.#startPromise = this.#enqueue({ kind: "start" });
      }
      if (this.#queue.length >= this.#options.maxQueueSize) this.#dropOldest();
      this.#queue.push(item);
      this.#persist(item);
      this.#log(`queued ${item.kind}`);
      this.#flush();
    });
  }

  /** A full queue sheds the oldest action or view; start and link carry the identity. */
  #dropOldest() {
    const index = this.#queue.findIndex((item) => DURABLE.has(item.kind));
    this.#log("queue full: the oldest item is dropped", "warn");
    this.#settle(this.#queue[Math.max(index, 0)], { ok: false });
  }

  #persist(item) {
    if (!DURABLE.has(item.kind)) return;
    const { kind, body, anonymousId, key, seq, viewKey, viewId } = item;
    this.#store.set(QUEUE_PREFIX + key, JSON.stringify({ kind, body, anonymousId, key, seq, viewKey, viewId }));
  }

  /** Adopt what earlier pages of this device left unsent, newest `maxQueueSize` of it. */
  #restore() {
    if (this.#restored) return;
    this.#restored = true;
    const mine = new Set(this.#queue.map((item) => item.key));
    const found = [];
    for (const name of this.#store.keys()) {
      if (!name.startsWith(QUEUE_PREFIX)) continue;
      try {
        const item = JSON.parse(this.#store.get(name));
        if (DURABLE.has(item.kind) && typeof item.key === "string" && !mine.has(item.key)) found.push(item);
        else if (!mine.has(item.key)) this.#store.del(name);
      } catch {
        this.#store.del(name);
      }
    }
    found.sort((a, b) => a.seq - b.seq);
    for (const item of found) {
      item.attempts = 0;
      if (this.#queue.length >= this.#options.maxQueueSize) this.#dropOldest();
      this.#queue.push(item);
    }
    this.#flush();
  }

  async #flush() {
    // One delivery loop at a time: an item leaves the queue only once the API accepted it
    // (or refused it for good), so nothing is sent twice after success.
    if (this.#flushing || this.#retryTimer !== null || this.#halted) return;
    this.#flushing = true;
    try {
      while (this.#queue.length > 0 && !this.#halted) {
        if (this.#window?.navigator?.onLine === false) {
          this.#log("offline: waiting for the online event");
          return;
        }
        // Until the device has an id only a start can go (its answer brings the id), and
        // items that kept their own.
        const item = this.#anonymousId
          ? this.#queue[0]
          : this.#queue.find((queued) => queued.kind === "start" || queued.anonymousId);
        if (!item) return; // the next start() resumes
        let outcome;
        try {
          outcome = await this.#deliver(item);
        } catch (error) {
          outcome = { retry: true, error };
        }
        if (this.#halted) return; // stopped meanwhile: its abort is no failure to retry
        if (!this.#queue.includes(item)) continue; // settled meanwhile, by a flush on hide
        if (!outcome.ok) this.#failed(item, outcome);
        if (outcome.retry && ++item.attempts < this.#options.maxAttempts) {
          this.#scheduleRetry(item.attempts - 1);
          return;
        }
        if (!outcome.ok) this.#log(`${item.kind} dropped`, "warn");
        this.#settle(item, outcome);
      }
    } finally {
      this.#flushing = false;
    }
  }

  #settle(item, outcome) {
    const index = this.#queue.indexOf(item);
    if (index < 0) return;
    this.#queue.splice(index, 1);
    this.#store.del(QUEUE_PREFIX + item.key);
    this.#stats[outcome.ok ? "delivered" : "dropped"] += 1;
    item.resolve?.(outcome.ok ? outcome.body : null);
    if (item.kind === "start" && !outcome.ok) {
      this.#startPromise = null; // the next start() tries again
      // Without an id nothing that waited for this start can go: it is dropped with it.
      if (!this.#anonymousId) for (const waiting of this.#queue.filter((queued) => !queued.anonymousId)) this.#settle(waiting, outcome);
    }
  }

  #scheduleRetry(attempt) {
    const { retryBaseMs, retryMaxMs } = this.#options;
    this.#stats.retries += 1;
    const delay = retryDelay(attempt, retryBaseMs, retryMaxMs, this.#random);
    this.#log(`retry in ${Math.round(delay)} ms`);
    this.#retryTimer = unref(
      setTimeout(() => {
        this.#retryTimer = null;
        this.#flush();
      }, delay),
    );
  }

  /** Says why a request failed; one that got no answer from another origin is most often CORS. */
  #failed(item, { status, error }) {
    if (!this.#options.debug) return;
    let cause = status ? `answered ${status}` : `no answer${error ? ` (${error})` : ""}`;
    try {
      const page = this.#window.location.origin;
      const api = new URL(this.#options.baseUrl || "/", this.#window.location.href).origin;
      if (!status && api !== page) {
        cause += `; the browser blocks a request from ${page} to ${api} unless the API lists ${page} in PIN_HTTP__CORS_ORIGINS (CORS)`;
      }
    } catch {
      // No page location (a test's window): no origin to compare.
    }
    this.#log(`${item.kind} failed: ${cause}`, "warn");
  }

  async #deliver(item, init = {}) {
    switch (item.kind) {
      case "start":
        return this.#deliverStart(item);
      case "action":
        return this.#post(`${API}/actions`, item.body, item, init);
      case "viewStart": {
        const outcome = await this.#post(`${API}/property-views`, item.body, item, init);
        if (outcome.ok) this.#viewStarted(item.key, outcome.body.viewId);
        return outcome;
      }
      case "viewEnd":
        // The start of this view never made it (dropped or refused): nothing to end.
        if (!item.viewId) return { ok: false };
        return this.#post(`${API}/property-views/${item.viewId}/end`, undefined, item, init);
      case "link": {
        const outcome = await this.#post(`${API}/sessions/link`, undefined, item, init, {
          Authorization: `Bearer ${item.accessToken}`,
        });
        if (outcome.ok) {
          this.#sessionId = outcome.body.sessionId;
          this.#userId = outcome.body.userId;
        }
        return outcome;
      }
    }
  }

  #viewStarted(key, viewId) {
    if (this.#view?.key === key) this.#view.viewId = viewId;
    for (const item of this.#queue) {
      if (item.viewKey === key) {
        item.viewId = viewId;
        this.#persist(item);
      }
    }
  }

  async #deliverStart(item) {
    item.anonymousId ??= this.#anonymousId;
    const outcome = item.anonymousId
      ? await this.#post(`${API}/sessions/start`, undefined, item)
      : await this.#firstStart(item);
    if (outcome.ok && item.anonymousId === this.#anonymousId) {
      this.#sessionId = outcome.body.sessionId ?? null;
      this.#userId = outcome.body.userId ?? null;
      this.#log(`session ${this.#sessionId} ${outcome.body.created ? "started" : "continued"}`);
    }
    return outcome;
  }

  /**
   * The device's first start, under the device lock: another tab's id if one arrived, else a
   * start without X-Anonymous-Id whose Idempotency-Key is kept (in both stores) until the
   * answer brings the id the service issued.
   */
  #firstStart(item) {
    const ask = async () => {
      if (this.#halted) return { retry: true }; // stopped while waiting for the lock
      const known = this.#readId() ?? (await this.#shared.read(ID_KEY));
      if (known) {
        item.anonymousId = this.#adoptId(known);
        return this.#post(`${API}/sessions/start`, undefined, item);
      }
      const key = this.#store.get(START_KEY) ?? (await this.#shared.read(START_KEY)) ?? newId(this.#window);
      this.#store.set(START_KEY, key);
      await this.#shared.write(START_KEY, key);
      const outcome = await this.#post(`${API}/sessions/start`, undefined, item, {}, { "Idempotency-Key": key });
      const issued = outcome.ok && outcome.body.anonymousId;
      if (UUID.test(issued)) {
        item.anonymousId = this.#adoptId(issued);
        this.#store.del(START_KEY);
        await this.#shared.write(ID_KEY, issued); // before the lock is released
        await this.#shared.write(START_KEY, null);
      }
      return outcome;
    };
    const locks = this.#window?.navigator?.locks;
    return locks?.request ? locks.request(DEVICE_LOCK, ask) : ask();
  }

  async #post(path, body, item, init = {}, extra = {}) {
    const anonymousId = item.anonymousId ?? this.#anonymousId;
    const headers = { ...extra };
    if (anonymousId) headers["X-Anonymous-Id"] = anonymousId;
    if (DURABLE.has(item.kind) && item.kind !== "viewEnd") headers["Idempotency-Key"] = item.key;
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const response = await this.#fetch(this.#options.baseUrl + path, {
      method: "POST",
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      credentials: "omit",
      signal: this.#abort.signal,
      ...init,
    });
    if (!response.ok) return { ok: false, retry: isRetryable(response.status), status: response.status };
    try {
      const parsed = JSON.parse(await response.text());
      if (parsed && typeof parsed === "object") return { ok: true, body: parsed };
    } catch {
      // Not our API's answer (a proxy's HTML page): retrying would get the same.
    }
    return { ok: false, status: response.status };
  }

  // --- device identity -----------------------------------------------------------------

  /** The stored id, unless storage was corrupted into something the API would refuse. */
  #readId() {
    const id = this.#store.get(ID_KEY) ?? readCookie(this.#document);
    return UUID.test(id) && !/^[0-]+$/.test(id) ? id : null;
  }

  #adoptId(id) {
    this.#anonymousId = id;
    if (!this.#store.set(ID_KEY, id)) writeCookie(this.#document, id);
    return id;
  }

  #dropId() {
    this.#anonymousId = null;
    this.#store.del(ID_KEY);
    writeCookie(this.#document, null);
    this.#shared.write(ID_KEY, null);
  }

  // --- diagnostics ---------------------------------------------------------------------

  /** With `debug`, one console line per decision or failure. */
  #log(message, level = "info") {
    if (this.#options.debug) globalThis.console?.[level]?.(`[pin-tracker] ${message}`);
  }

  /** Tells the status listeners (and the debug log) when the status has changed. */
  #emit() {
    const status = this.status;
    if (status === this.#reported) return;
    this.#reported = status;
    this.#log(`status: ${status}`);
    for (const callback of this.#statusListeners) this.#guard(() => callback(status));
  }

  // --- heartbeats ----------------------------------------------------------------------

  #isVisible() {
    return !this.#document || this.#document.visibilityState === "visible";
  }

  #tick() {
    this.#stats.ticks += 1;
    const idleFor = this.#now() - this.#lastInteractionAt;
    // An idle or background tab stays silent, so it never keeps a session open on its own.
    if (!this.#isVisible() || !(idleFor >= 0 && idleFor < this.#options.interactionWindowMs)) {
      return this.#log("no heartbeat: the page is hidden or unused");
    }
    this.#heartbeat({});
  }

  /** Heartbeats are not queued: a missed one is simply replaced by the next. */
  async #heartbeat(init) {
    if (!this.#anonymousId || !this.#sessionId) return;
    this.#lastHeartbeatAt = this.#now();
    this.#stats.heartbeats += 1;
    try {
      const outcome = await this.#post(`${API}/sessions/heartbeat`, undefined, {}, init);
      // After a close by inactivity the API starts a new session (`restarted`).
      if (outcome.ok && outcome.body.sessionId) this.#sessionId = outcome.body.sessionId;
    } catch (error) {
      // Offline: the next heartbeat will do.
      this.#failed({ kind: "heartbeat" }, { error });
    }
  }

  #onHidden() {
    // One last heartbeat for the activity since the previous one, and everything queued,
    // with `keepalive` so it outlives the page if the tab is being closed. (`sendBeacon`
    // cannot carry the X-Anonymous-Id and Idempotency-Key headers.) An item whose answer
    // never arrives stays stored; its next sending has the same key, so it counts once.
    if (this.#window?.navigator?.onLine === false) return;
    for (const item of this.#queue) {
      if (DURABLE.has(item.kind) && (item.anonymousId ?? this.#anonymousId) && !item.hiddenSend) {
        item.hiddenSend = true;
        this.#deliver(item, { keepalive: true })
          .then((outcome) => outcome.ok && this.#settle(item, outcome))
          .catch(() => {})
          .finally(() => (item.hiddenSend = false));
      }
    }
    if (this.#finalHeartbeatSent || this.#lastInteractionAt <= this.#lastHeartbeatAt) return;
    this.#finalHeartbeatSent = true;
    this.#stats.finalHeartbeats += 1;
    this.#heartbeat({ keepalive: true });
  }

  // --- browser events ------------------------------------------------------------------

  /** Runs `action` so that no error, thrown or rejected, reaches the host page. */
  #guard(action) {
    try {
      Promise.resolve(action()).catch(() => {});
    } catch {
      // Nothing the tracker does is worth breaking the page for.
    }
  }

  #on(target, type, handler, opts) {
    if (!target?.addEventListener) return;
    const guarded = (event) => this.#guard(() => handler(event));
    target.addEventListener(type, guarded, opts);
    this.#listeners.push([target, type, guarded, opts]);
  }

  #listen() {
    if (this.#listeners.length) return;
    const interacted = (event) => {
      // Chromium sends a trusted mousemove that moved nothing when the page lays out under
      // a resting pointer (seen at load, at 0,0): the page's doing, not the person's. A
      // browser that reports no movement at all (no movementX) still counts every mousemove.
      if (event.type === "mousemove" && event.movementX === 0 && event.movementY === 0) return;
      this.#lastInteractionAt = this.#now();
    };
    for (const type of INTERACTION_EVENTS) {
      this.#on(this.#window, type, interacted, { capture: true, passive: true });
    }
    this.#on(this.#document, "visibilitychange", () => {
      if (this.#isVisible()) this.#finalHeartbeatSent = false;
      else this.#onHidden();
    });
    this.#on(this.#window, "pagehide", () => this.#onHidden());
    this.#on(this.#window, "online", () => this.flush());
    this.#on(this.#window, "storage", (event) => {
      if (event.key === OPT_OUT_KEY || event.key === CONSENT_KEY) {
        if (!this.#allowed()) this.#halt(false); // another tab opted out: so does this one
      } else if (event.key === ID_KEY && event.newValue !== this.#anonymousId) {
        // Removed with no start pending: another tab forgot the device.
        if (!event.newValue && !this.#store.get(START_KEY)) return this.#halt(false);
        if (event.newValue && !this.#anonymousId) return (this.#anonymousId = event.newValue); // its first id
        // Another tab reset the device (sign-out): follow it into the new guest session,
        // whose id that tab's start (or this one's, under the lock) gets from the service.
        this.#anonymousId = event.newValue;
        this.#sessionId = this.#userId = null;
        this.#running = false;
        this.start();
      }
    });
  }
}

/** localStorage behind a wall: every failure (private mode, quota, denial) reads as absent. */
class Store {
  #storage;

  constructor(storage) {
    this.#storage = storage;
  }

  get(key) {
    try {
      return this.#storage?.getItem(key) ?? null;
    } catch {
      return null;
    }
  }

  set(key, value) {
    try {
      this.#storage.setItem(key, value);
      return true;
    } catch {
      return false;
    }
  }

  del(key) {
    try {
      this.#storage?.removeItem(key);
    } catch {
      // Nothing stored, then.
    }
  }

  keys() {
    try {
      return Array.from({ length: this.#storage.length }, (_, index) => this.#storage.key(index));
    } catch {
      return [];
    }
  }
}

/** The AnonymousId and the first start's key in IndexedDB; every failure reads as absent. */
class SharedDeviceId {
  #database = null;

  constructor(indexedDB) {
    try {
      const open = indexedDB?.open(SHARED_DB.name, 1);
      if (!open) return;
      this.#database = new Promise((resolve) => {
        open.onupgradeneeded = () => open.result.createObjectStore(SHARED_DB.store);
        open.onsuccess = () => resolve(open.result);
        open.onerror = open.onblocked = () => resolve(null);
      });
    } catch {
      // IndexedDB denied: the id lives in localStorage or the cookie alone.
    }
  }

  async read(key) {
    const db = await this.#database;
    if (!db) return null;
    return new Promise((resolve) => {
      try {
        const request = db.transaction(SHARED_DB.store).objectStore(SHARED_DB.store).get(key);
        request.onsuccess = () => resolve(request.result ?? null);
        request.onerror = () => resolve(null);
      } catch {
        resolve(null);
      }
    });
  }

  /** Resolves once the write is committed, so the next lock holder is sure to read it. */
  async write(key, value) {
    const db = await this.#database;
    if (!db) return;
    await new Promise((resolve) => {
      try {
        const transaction = db.transaction(SHARED_DB.store, "readwrite");
        transaction.objectStore(SHARED_DB.store).put(value, key);
        transaction.oncomplete = transaction.onerror = transaction.onabort = resolve;
      } catch {
        resolve();
      }
    });
  }
}

/** A random (version 4) UUID; `crypto.randomUUID` needs a secure context, this does not. */
function newId(win) {
  const crypto = win?.crypto ?? globalThis.crypto ?? { getRandomValues: (a) => a.map(() => Math.random() * 256) };
  if (crypto.randomUUID) return crypto.randomUUID();
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  bytes[6] = (bytes[6] & 0x0f) | 0x40;
  bytes[8] = (bytes[8] & 0x3f) | 0x80;
  const hex = Array.from(bytes, (byte) => byte.toString(16).padStart(2, "0")).join("");
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

/** Do-Not-Track or Global Privacy Control, as the browser reports them. */
function doNotTrack(win) {
  const navigator = win?.navigator ?? {};
  return navigator.globalPrivacyControl === true || navigator.doNotTrack === "1" || win?.doNotTrack === "1";
}

function localStorageOf(win) {
  try {
    return win?.localStorage ?? null;
  } catch {
    return null; // a sandboxed frame throws on mere access
  }
}

function readCookie(doc) {
  try {
    for (const part of doc.cookie.split(";")) {
      const [key, ...rest] = part.trim().split("=");
      if (key === COOKIE_NAME) return decodeURIComponent(rest.join("=")) || null;
    }
  } catch {
    // No document or no cookies.
  }
  return null;
}

function writeCookie(doc, value) {
  try {
    const secure = doc.location?.protocol === "https:" ? "; Secure" : "";
    const age = value === null ? 0 : COOKIE_MAX_AGE_SECONDS;
    doc.cookie = `${COOKIE_NAME}=${encodeURIComponent(value ?? "")}; Path=/; Max-Age=${age}; SameSite=Lax${secure}`;
  } catch {
    // Cookies denied too: the id lives in memory for this page only.
  }
}

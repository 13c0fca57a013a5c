// PIN user-activity tracker: a dependency-free ES module for the browser.
//
// It keeps the device's AnonymousId, starts the user-activity Session on load,
// keeps it alive with heartbeats while a person is actually using the page, and
// delivers actions and property views through a bounded retry queue.
// The HTTP contract is the service's `/api/user-activity/*` API.

const STORAGE_KEY = "pin.anonymousId";
const COOKIE_NAME = "pin_anonymous_id";
const COOKIE_MAX_AGE_SECONDS = 2 * 365 * 24 * 60 * 60;
// Serialises the very first start across tabs, so two tabs opened at once end
// up with one AnonymousId (and so one Session) instead of two.
const DEVICE_LOCK = "pin-tracker:anonymous-id";
// localStorage reaches other tabs asynchronously, so the tab holding the lock writes the id
// to IndexedDB too, which every tab reads consistently.
const SHARED_DB = { name: "pin-tracker", store: "device", key: "anonymousId" };
const INTERACTION_EVENTS = ["pointerdown", "keydown", "wheel", "touchstart", "scroll", "mousemove"];

const DEFAULTS = {
  baseUrl: "",
  heartbeatIntervalMs: 60_000,
  interactionWindowMs: 60_000,
  retryBaseMs: 1_000,
  retryMaxMs: 60_000,
  maxQueueSize: 100,
  autoStart: true,
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

/** Create a tracker; with `autoStart` (the default) the session starts at once. */
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
  #storage;
  #shared;
  #anonymousId = null;
  #sessionId = null;
  #userId = null;
  #queue = [];
  #flushing = false;
  #attempt = 0;
  #retryTimer = null;
  #heartbeatTimer = null;
  #startQueued = false;
  #startPromise = null;
  #lastInteractionAt = Number.NEGATIVE_INFINITY;
  #lastHeartbeatAt = Number.NEGATIVE_INFINITY;
  #finalHeartbeatSent = false;
  #view = null;
  #listeners = [];
  #stats = { ticks: 0, heartbeats: 0, finalHeartbeats: 0, delivered: 0, dropped: 0, retries: 0 };

  constructor(options = {}) {
    this.#options = { ...DEFAULTS, ...options };
    this.#window = options.window ?? globalThis.window;
    this.#document = options.document ?? globalThis.document;
    this.#fetch = options.fetch ?? globalThis.fetch.bind(globalThis);
    this.#now = options.now ?? (() => Date.now());
    this.#random = options.random ?? Math.random;
    this.#storage = options.storage === undefined ? safeLocalStorage(this.#window) : options.storage;
    const indexedDB = options.indexedDB === undefined ? this.#window?.indexedDB : options.indexedDB;
    this.#shared = new SharedDeviceId(indexedDB ?? null);
    this.#anonymousId = this.#readAnonymousId();
    this.#listen();
    if (this.#options.autoStart) this.start();
  }

  /** The device's AnonymousId, shared by every tab; null until the first start succeeds. */
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

  /** Counters for diagnostics and tests. */
  get stats() {
    return { ...this.#stats, pending: this.#queue.length };
  }

  /** Start (or resume) the device's session. Idempotent; called on load by default. */
  start() {
    return this.#queueStart(false);
  }

  /** `fresh`: ask the API for a new AnonymousId rather than reuse the device's. */
  #queueStart(fresh) {
    if (this.#startQueued) return this.#startPromise;
    this.#startQueued = true;
    this.#startPromise = this.#enqueue({ kind: "start", fresh });
    this.#startHeartbeats();
    return this.#startPromise;
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
    const view = { propertyObjectId, viewId: null, ended: false };
    this.#view = view;
    return this.#enqueue({ kind: "viewStart", view });
  }

  /** End the open view; resolves with `{viewId, durationSeconds}`, or null without one. */
  viewEnd() {
    const view = this.#view;
    this.#view = null;
    if (!view) return Promise.resolve(null);
    view.ended = true;
    return this.#enqueue({ kind: "viewEnd", view });
  }

  /** Link the device's session to the user who just signed in (access token of that user). */
  link(accessToken) {
    return this.#enqueue({ kind: "link", accessToken });
  }

  /**
   * On sign-out: forget the AnonymousId, so what happens next on this device is not
   * attributed to the user who left, and start a fresh guest session. Other tabs adopt
   * the new id through the `storage` event.
   */
  reset() {
    this.#view = null;
    this.#userId = null;
    this.#sessionId = null;
    this.#anonymousId = null;
    this.#writeAnonymousId(null);
    this.#shared.write(null);
    this.#startQueued = false;
    return this.#queueStart(true);
  }

  /** Stop timers and listeners; pending items stay unsent. */
  stop() {
    clearInterval(this.#heartbeatTimer);
    clearTimeout(this.#retryTimer);
    this.#heartbeatTimer = null;
    this.#retryTimer = null;
    for (const [target, type, handler, opts] of this.#listeners) {
      target.removeEventListener(type, handler, opts);
    }
    this.#listeners = [];
  }

  /** Deliver queued items now (also runs by itself on `online` and after each backoff). */
  flush() {
    clearTimeout(this.#retryTimer);
    this.#retryTimer = null;
    return this.#flush();
  }

  // --- queue ---------------------------------------------------------------------------

  #enqueue(item) {
    return new Promise((resolve) => {
      item.resolve = resolve;
      // Items belong to the device identity current when they happened, even if
      // `reset()` replaces it before they are delivered.
      item.anonymousId = this.#anonymousId;
      if (this.#queue.length >= this.#options.maxQueueSize) this.#dropOldest();
      this.#queue.push(item);
      this.#flush();
    });
  }

  /** A full queue sheds the oldest action or view; start and link carry the identity. */
  #dropOldest() {
    let index = this.#queue.findIndex((item) => item.kind !== "start" && item.kind !== "link");
    if (index < 0) index = 0;
    const [dropped] = this.#queue.splice(index, 1);
    this.#stats.dropped += 1;
    dropped.resolve(null);
  }

  async #flush() {
    // One delivery loop at a time: an item is sent by exactly one loop and removed only
    // after the API accepted it, so nothing is sent twice after success.
    if (this.#flushing || this.#retryTimer !== null) return;
    this.#flushing = true;
    try {
      while (this.#queue.length > 0) {
        if (this.#window?.navigator?.onLine === false) return; // the `online` event resumes
        const item = this.#queue[0];
        let outcome;
        try {
          outcome = await this.#deliver(item);
        } catch {
          outcome = { retry: true };
        }
        if (outcome.retry) {
          this.#scheduleRetry();
          return;
        }
        this.#queue.shift();
        this.#attempt = 0;
        if (outcome.ok) this.#stats.delivered += 1;
        else this.#stats.dropped += 1;
        item.resolve(outcome.ok ? outcome.body : null);
      }
    } finally {
      this.#flushing = false;
    }
  }

  #scheduleRetry() {
    const { retryBaseMs, retryMaxMs } = this.#options;
    const delay = retryDelay(this.#attempt, retryBaseMs, retryMaxMs, this.#random);
    this.#attempt += 1;
    this.#stats.retries += 1;
    this.#retryTimer = setTimeout(() => {
      this.#retryTimer = null;
      this.#flush();
    }, delay);
  }

  async #deliver(item) {
    switch (item.kind) {
      case "start":
        return this.#withDeviceLock(() => this.#deliverStart(item));
      case "action":
        return this.#post("/api/user-activity/actions", item.body, { item });
      case "viewStart": {
        const body = { propertyObjectId: item.view.propertyObjectId };
        const outcome = await this.#post("/api/user-activity/property-views", body, { item });
        if (outcome.ok) item.view.viewId = outcome.body.viewId;
        return outcome;
      }
      case "viewEnd":
        // The start of this view never made it (dropped or refused): nothing to end.
        if (item.view.viewId === null) return { ok: false };
        return this.#post(`/api/user-activity/property-views/${item.view.viewId}/end`, undefined, {
          item,
        });
      case "link": {
        const outcome = await this.#post("/api/user-activity/sessions/link", undefined, {
          item,
          headers: { Authorization: `Bearer ${item.accessToken}` },
        });
        if (outcome.ok) {
          this.#sessionId = outcome.body.sessionId;
          this.#userId = outcome.body.userId;
        }
        return outcome;
      }
      default:
        return { ok: false };
    }
  }

  async #deliverStart(item) {
    if (!item.fresh) {
      // Another tab may have obtained the id while this one waited for the lock.
      this.#anonymousId =
        this.#readAnonymousId() ?? this.#anonymousId ?? (await this.#shared.read());
    }
    let outcome = await this.#post("/api/user-activity/sessions/start");
    if (outcome.status === 400 && this.#anonymousId) {
      // A stored id the API refuses (corrupted storage): forget it and get a new one.
      this.#anonymousId = null;
      this.#writeAnonymousId(null);
      outcome = await this.#post("/api/user-activity/sessions/start");
    }
    if (outcome.ok) {
      this.#adoptSession(outcome.body);
      this.#userId = outcome.body.userId ?? null;
      await this.#shared.write(this.#anonymousId); // before the lock is released
    }
    return outcome;
  }

  #adoptSession(body) {
    if (body.anonymousId && body.anonymousId !== this.#anonymousId) {
      this.#anonymousId = body.anonymousId;
      this.#writeAnonymousId(body.anonymousId);
    }
    if (body.sessionId) this.#sessionId = body.sessionId;
  }

  async #post(path, body = undefined, { item = null, headers: extra = {}, init = {} } = {}) {
    const headers = { ...extra };
    const anonymousId = item?.anonymousId ?? this.#anonymousId;
    if (anonymousId) headers["X-Anonymous-Id"] = anonymousId;
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const response = await this.#fetch(this.#options.baseUrl + path, {
      method: "POST",
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      credentials: "omit",
      ...init,
    });
    if (response.ok) {
      const text = await response.text();
      return { ok: true, body: text ? JSON.parse(text) : null };
    }
    return { ok: false, retry: isRetryable(response.status), status: response.status };
  }

  async #withDeviceLock(action) {
    const locks = this.#window?.navigator?.locks;
    if (!locks?.request) return action();
    return locks.request(DEVICE_LOCK, action);
  }

  // --- heartbeats ----------------------------------------------------------------------

  #startHeartbeats() {
    if (this.#heartbeatTimer !== null) return;
    this.#heartbeatTimer = setInterval(() => this.#tick(), this.#options.heartbeatIntervalMs);
  }

  #isVisible() {
    return !this.#document || this.#document.visibilityState === "visible";
  }

  #tick() {
    this.#stats.ticks += 1;
    const idleFor = this.#now() - this.#lastInteractionAt;
    // An idle or background tab stays silent, so it never keeps a session open on its own.
    if (!this.#isVisible() || idleFor >= this.#options.interactionWindowMs) return;
    this.#heartbeat({});
  }

  /** Heartbeats are not queued: a missed one is simply replaced by the next. */
  async #heartbeat(init) {
    if (!this.#anonymousId || !this.#sessionId) return;
    this.#lastHeartbeatAt = this.#now();
    this.#stats.heartbeats += 1;
    try {
      const outcome = await this.#post("/api/user-activity/sessions/heartbeat", undefined, { init });
      // After a close by inactivity the API starts a new session (`restarted`).
      if (outcome.ok && outcome.body?.sessionId) this.#sessionId = outcome.body.sessionId;
    } catch {
      // Offline: the next heartbeat will do.
    }
  }

  #onHidden() {
    // One last heartbeat for the activity since the previous one; `keepalive` lets it
    // outlive the page if the tab is being closed.
    if (this.#finalHeartbeatSent || this.#lastInteractionAt <= this.#lastHeartbeatAt) return;
    this.#finalHeartbeatSent = true;
    this.#stats.finalHeartbeats += 1;
    this.#heartbeat({ keepalive: true });
  }

  // --- device identity -----------------------------------------------------------------

  #readAnonymousId() {
    try {
      const stored = this.#storage?.getItem(STORAGE_KEY);
      if (stored) return stored;
    } catch {
      // Storage denied: fall through to the cookie.
    }
    return readCookie(this.#document, COOKIE_NAME);
  }

  #writeAnonymousId(value) {
    try {
      if (this.#storage) {
        if (value === null) this.#storage.removeItem(STORAGE_KEY);
        else this.#storage.setItem(STORAGE_KEY, value);
        return;
      }
    } catch {
      // Storage full or denied: keep the id in a cookie instead.
    }
    writeCookie(this.#document, COOKIE_NAME, value);
  }

  // --- browser events ------------------------------------------------------------------

  #on(target, type, handler, opts) {
    if (!target?.addEventListener) return;
    target.addEventListener(type, handler, opts);
    this.#listeners.push([target, type, handler, opts]);
  }

  #listen() {
    const interacted = () => {
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
    this.#on(this.#window, "online", () => {
      this.#attempt = 0;
      this.flush();
    });
    this.#on(this.#window, "storage", (event) => {
      if (event.key !== STORAGE_KEY || !event.newValue) return;
      if (this.#anonymousId === null) {
        // Another tab obtained the first id; this tab's queued start will use it.
        this.#anonymousId = event.newValue;
      } else if (event.newValue !== this.#anonymousId) {
        // Another tab reset the device (sign-out): follow it into the new guest session.
        this.#anonymousId = event.newValue;
        this.#sessionId = null;
        this.#userId = null;
        this.#startQueued = false;
        this.start();
      }
    });
  }
}

/** The AnonymousId in IndexedDB; every failure reads as "no id" and is otherwise ignored. */
class SharedDeviceId {
  #database = null;

  constructor(indexedDB) {
    if (!indexedDB) return;
    this.#database = new Promise((resolve) => {
      const open = indexedDB.open(SHARED_DB.name, 1);
      open.onupgradeneeded = () => open.result.createObjectStore(SHARED_DB.store);
      open.onsuccess = () => resolve(open.result);
      open.onerror = () => resolve(null);
      open.onblocked = () => resolve(null);
    });
  }

  async read() {
    const db = await this.#database;
    if (!db) return null;
    return new Promise((resolve) => {
      try {
        const request = db.transaction(SHARED_DB.store).objectStore(SHARED_DB.store).get(SHARED_DB.key);
        request.onsuccess = () => resolve(request.result ?? null);
        request.onerror = () => resolve(null);
      } catch {
        resolve(null);
      }
    });
  }

  /** Resolves once the write is committed, so the next lock holder is sure to read it. */
  async write(value) {
    const db = await this.#database;
    if (!db) return;
    await new Promise((resolve) => {
      try {
        const transaction = db.transaction(SHARED_DB.store, "readwrite");
        transaction.objectStore(SHARED_DB.store).put(value, SHARED_DB.key);
        transaction.oncomplete = transaction.onerror = transaction.onabort = () => resolve();
      } catch {
        resolve();
      }
    });
  }
}

function safeLocalStorage(win) {
  try {
    const storage = win?.localStorage;
    if (!storage) return null;
    // Some browsers expose localStorage but throw on write (private modes, quotas).
    storage.setItem("pin.probe", "1");
    storage.removeItem("pin.probe");
    return storage;
  } catch {
    return null;
  }
}

function readCookie(doc, name) {
  if (!doc?.cookie) return null;
  for (const part of doc.cookie.split(";")) {
    const [key, ...rest] = part.trim().split("=");
    if (key === name) return decodeURIComponent(rest.join("=")) || null;
  }
  return null;
}

function writeCookie(doc, name, value) {
  if (!doc) return;
  const secure = doc.location?.protocol === "https:" ? "; Secure" : "";
  doc.cookie =
    value === null
      ? `${name}=; Path=/; Max-Age=0; SameSite=Lax${secure}`
      : `${name}=${encodeURIComponent(value)}; Path=/; Max-Age=${COOKIE_MAX_AGE_SECONDS}; SameSite=Lax${secure}`;
}

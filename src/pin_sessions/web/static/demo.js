// The demo page: one tracker for the page, exposed as `window.pinTracker` for the console.
import { createTracker } from "/static/pin-tracker.js";
import { logout, mountSignIn } from "/static/sign-in.js";

const TOKENS_KEY = "pin.demo.tokens";
// The latest sign-in on this browser, so a tab opened after it starts signed in. Each tab
// then keeps its own tokens (sessionStorage): two tabs may hold two users.
const LATEST_SIGN_IN_KEY = "pin.demo.latestSignIn";
// The number the development sign-in uses when none is typed.
const DEVELOPER_PHONE = "+15550100200";
const PROPERTIES = [
  { id: "0b7f8c3e-6a52-4c1e-9d1a-5f0c2a7e4b11", name: "Riverside flat" },
  { id: "5d2e9a40-1f3b-4e8c-a6d7-2b9c4e1f8a22", name: "Harbour office" },
  { id: "9c4a1b7d-3e6f-4a2b-8c5d-7e1f0a9b6c33", name: "Hill cottage" },
];

// Query parameters shorten the tracker's intervals, e.g. /demo?heartbeatMs=2000.
const params = new URLSearchParams(location.search);
const number = (name) => (params.has(name) ? Number(params.get(name)) : undefined);
const options = Object.fromEntries(
  Object.entries({
    heartbeatIntervalMs: number("heartbeatMs"),
    interactionWindowMs: number("interactionMs"),
    retryBaseMs: number("retryMs"),
    retryMaxMs: number("retryMaxMs"),
    maxQueueSize: number("queueSize"),
  }).filter(([, value]) => value !== undefined),
);
const tracker = createTracker(options);
window.pinTracker = tracker;

const $ = (id) => document.getElementById(id);
// Why nothing is recorded, for each status of the tracker but "tracking".
const NOT_TRACKING = {
  "opted-out": "Opted out: this browser sends nothing and keeps no id. Opt in to be tracked again.",
  "do-not-track": "Not tracking: this browser asks sites not to track it (Do Not Track).",
  "no-consent": "Not tracking: no consent was given.",
  stopped: "Not tracking: this device was forgotten. Reload the page to start a new session.",
};
let viewing = null; // the property shown as open; only ever while the tracker records

function adoptLatestSignIn() {
  try {
    const latest = localStorage.getItem(LATEST_SIGN_IN_KEY);
    if (latest && !sessionStorage.getItem(TOKENS_KEY)) sessionStorage.setItem(TOKENS_KEY, latest);
  } catch {
    // Storage denied: this tab starts signed out.
  }
}

function savedTokens() {
  try {
    return JSON.parse(sessionStorage.getItem(TOKENS_KEY));
  } catch {
    return null;
  }
}

/** Everything on the page follows from the tracker and the tokens, so no two parts disagree. */
function showState() {
  const stats = tracker.stats;
  const tracking = tracker.status === "tracking";
  if (!tracking) viewing = null; // an opt-out or a forget ended it
  if (saidWhile !== null && saidWhile !== tracker.status) say("");
  $("anonymous-id").textContent = tracker.anonymousId ?? "–";
  $("session-id").textContent = tracker.sessionId ?? "–";
  $("user-id").textContent = tracking ? (tracker.userId ?? "guest") : "–";
  $("heartbeats").textContent = String(stats.heartbeats);
  $("pending").textContent = String(stats.pending);
  $("network").textContent = navigator.onLine ? "online" : "offline";
  $("tracking").textContent = tracker.status;
  $("tracking-note").textContent = NOT_TRACKING[tracker.status] ?? "";
  $("tracking-note").hidden = tracking;
  $("opt-out").hidden = tracker.status === "opted-out";
  $("opt-in").hidden = tracker.status !== "opted-out";
  $("viewing").textContent = viewing
    ? `Viewing ${viewing}.`
    : tracking
      ? "Not viewing a property."
      : "Nothing is recorded while this browser is not tracked.";
  const tokens = savedTokens();
  $("sign-in-forms").hidden = tokens !== null;
  $("sign-out").hidden = tokens === null;
  $("signed-in-as").hidden = tokens === null;
  if (tokens) $("signed-in-as").textContent = `Signed in as user ${tokens.userId}; ${linkState(tokens, tracking)}.`;
}

function linkState(tokens, tracking) {
  if (!tracking) return "this browser is not tracked, so no session is linked";
  return tracker.userId === tokens.userId
    ? "this device's session is linked to you"
    : "this device's session is not linked to you";
}

function renderProperties() {
  for (const property of PROPERTIES) {
    const open = document.createElement("button");
    open.textContent = `Open ${property.name}`;
    open.dataset.property = property.id;
    open.addEventListener("click", () => {
      tracker.viewStart(property.id);
      if (tracker.status === "tracking") viewing = property.name;
      showState();
    });
    const favourite = document.createElement("button");
    favourite.textContent = `★ ${property.name}`;
    favourite.dataset.favourite = property.id;
    favourite.addEventListener("click", () => {
      tracker.track("favourite-added", { source: "demo" }, { propertyObjectId: property.id });
    });
    $("properties").append(open, favourite);
  }
  const close = document.createElement("button");
  close.textContent = "Close view";
  close.id = "close-view";
  close.addEventListener("click", () => {
    tracker.viewEnd();
    viewing = null;
    showState();
  });
  $("properties").append(close);
}

// The tracker's status when the status line was written: a message about one state is
// cleared once another tab (or anything else) moves the tracker to another.
let saidWhile = null;

function say(message, { error = false } = {}) {
  $("status").textContent = message;
  $("status").classList.toggle("error", error);
  saidWhile = tracker.status;
}

function mountDemoSignIn() {
  mountSignIn({
    say,
    developerPhone: DEVELOPER_PHONE,
    anonymousId: async () => {
      await tracker.start(); // the AnonymousId must exist before confirm, to link this device
      return tracker.anonymousId;
    },
    onSignedIn: async (tokens) => {
      sessionStorage.setItem(TOKENS_KEY, JSON.stringify(tokens));
      localStorage.setItem(LATEST_SIGN_IN_KEY, JSON.stringify(tokens));
      say(`Signed in; ${await linkDevice(tokens)}.`);
      showState();
    },
  });
}

/** Link this device's session to the signed-in user; says what became of it. */
async function linkDevice(tokens) {
  if (tracker.status !== "tracking") return "this browser is not tracked, so no session is linked";
  const linked = await tracker.link(tokens.accessToken);
  return linked ? "this device's session is linked to you" : "this device's session could not be linked";
}

async function signOut() {
  const tokens = savedTokens();
  sessionStorage.removeItem(TOKENS_KEY);
  if (localStorage.getItem(LATEST_SIGN_IN_KEY) === JSON.stringify(tokens)) localStorage.removeItem(LATEST_SIGN_IN_KEY);
  if (tokens) await logout(tokens.accessToken).catch(() => {});
  const tracking = tracker.status === "tracking";
  await tracker.reset();
  say(tracking ? "Signed out; a new guest session started." : "Signed out.");
  showState();
}

function optOut() {
  tracker.optOut();
  say("Opted out: nothing more is sent, and this browser's ids are gone.");
  showState();
}

async function optIn() {
  tracker.optIn();
  await tracker.start();
  const tokens = savedTokens();
  say(tokens ? `Opted in: a new session started; ${await linkDevice(tokens)}.` : "Opted in: a new guest session started.");
  showState();
}

function forget() {
  tracker.forget();
  say("This device is forgotten: its ids and anything queued are gone.");
  showState();
}

adoptLatestSignIn();
mountDemoSignIn();
$("sign-out").addEventListener("click", signOut);
$("opt-out").addEventListener("click", optOut);
$("opt-in").addEventListener("click", optIn);
$("forget").addEventListener("click", forget);
renderProperties();
showState();
tracker.start().then(showState);
setInterval(showState, 500);
for (const type of ["online", "offline"]) window.addEventListener(type, showState);

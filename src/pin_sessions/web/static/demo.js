// The demo page: one tracker for the page, exposed as `window.pinTracker` for the console.
import { createTracker } from "/static/pin-tracker.js";
import { logout, mountSignIn } from "/static/sign-in.js";

const TOKENS_KEY = "pin.demo.tokens";
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

function showState() {
  const stats = tracker.stats;
  $("anonymous-id").textContent = tracker.anonymousId ?? "–";
  $("session-id").textContent = tracker.sessionId ?? "–";
  $("user-id").textContent = tracker.userId ?? "guest";
  $("heartbeats").textContent = String(stats.heartbeats);
  $("pending").textContent = String(stats.pending);
  $("network").textContent = navigator.onLine ? "online" : "offline";
  const signedIn = sessionStorage.getItem(TOKENS_KEY) !== null;
  $("sign-in-forms").hidden = signedIn;
  $("sign-out").hidden = !signedIn;
}

function renderProperties() {
  for (const property of PROPERTIES) {
    const open = document.createElement("button");
    open.textContent = `Open ${property.name}`;
    open.dataset.property = property.id;
    open.addEventListener("click", () => {
      tracker.viewStart(property.id);
      $("viewing").textContent = `Viewing ${property.name}.`;
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
    $("viewing").textContent = "Not viewing a property.";
  });
  $("properties").append(close);
}

function say(message, { error = false } = {}) {
  $("status").textContent = message;
  $("status").classList.toggle("error", error);
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
      const linked = await tracker.link(tokens.accessToken);
      say(linked ? "Signed in; the session is linked." : "Signed in, not linked.");
      showState();
    },
  });
}

async function signOut() {
  const tokens = JSON.parse(sessionStorage.getItem(TOKENS_KEY) ?? "null");
  sessionStorage.removeItem(TOKENS_KEY);
  if (tokens) await logout(tokens.accessToken).catch(() => {});
  await tracker.reset();
  say("Signed out; a new guest session started.");
  showState();
}

mountDemoSignIn();
$("sign-out").addEventListener("click", signOut);
renderProperties();
showState();
tracker.start().then(showState);
setInterval(showState, 500);
for (const type of ["online", "offline"]) window.addEventListener(type, showState);

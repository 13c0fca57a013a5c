// The dev-stats dashboard: signs a developer in, reads the summary, draws three charts.
import { donut, formatDuration, horizontalBars, stackedBars } from "/static/charts.js";
import { ApiError, logout, mountSignIn, refreshTokens, requestJson } from "/static/sign-in.js";

const TOKENS_KEY = "pin.devStats.tokens";
// The number "Sign in as developer" uses when none is typed.
const DEVELOPER_PHONE = "+15550100100";
const DAY_MS = 24 * 60 * 60 * 1000;
const params = new URLSearchParams(location.search);
// New sessions reach the summary as they close, so the page re-reads it now and then.
const RELOAD_MS = Number(params.get("reloadMs") ?? 15_000);

const $ = (id) => document.getElementById(id);
let reloadTimer = null;

function say(message, { error = false } = {}) {
  $("status").textContent = message;
  $("status").classList.toggle("error", error);
}

function savedTokens() {
  try {
    return JSON.parse(sessionStorage.getItem(TOKENS_KEY));
  } catch {
    return null;
  }
}

function saveTokens(tokens) {
  if (tokens) sessionStorage.setItem(TOKENS_KEY, JSON.stringify(tokens));
  else sessionStorage.removeItem(TOKENS_KEY);
}

const isoDay = (date) => date.toISOString().slice(0, 10);

function defaultRange() {
  const today = new Date();
  $("from").value = params.get("from") ?? isoDay(new Date(today.getTime() - 13 * DAY_MS));
  $("to").value = params.get("to") ?? isoDay(today);
}

/** Every day of the range, so quiet days show as gaps rather than vanish. */
function daysOf(from, to) {
  const days = [];
  for (let t = Date.parse(`${from}T00:00:00Z`); t <= Date.parse(`${to}T00:00:00Z`); t += DAY_MS) {
    days.push(isoDay(new Date(t)));
  }
  return days.length <= 366 ? days : [];
}

async function fetchSummary(tokens) {
  // Whole UTC days, both ends included.
  const query = new URLSearchParams({ from: $("from").value, to: $("to").value });
  return requestJson(`/api/dev-stats/sessions/summary?${query}`, {
    headers: { Authorization: `Bearer ${tokens.accessToken}` },
  });
}

async function load() {
  let tokens = savedTokens();
  if (!tokens) return showSignIn();
  try {
    let summary;
    try {
      summary = await fetchSummary(tokens);
    } catch (error) {
      // Access tokens live 15 minutes; the refresh token gets a new one.
      if (!(error instanceof ApiError) || error.status !== 401) throw error;
      tokens = { ...tokens, ...(await refreshTokens(tokens.refreshToken)) };
      saveTokens(tokens);
      summary = await fetchSummary(tokens);
    }
    render(summary);
    $("updated").textContent = `updated ${new Date().toLocaleTimeString()}`;
    say("");
  } catch (error) {
    if (error instanceof ApiError && error.status === 401) {
      saveTokens(null);
      return showSignIn("Your session ended; sign in again.");
    }
    if (error instanceof ApiError && error.status === 403) {
      return say("This user lacks the dev-stats.view permission. An operator grants it with " +
        "`pin-sessions users grant`; then sign out and in again.", { error: true });
    }
    say(error.message, { error: true });
  } finally {
    clearTimeout(reloadTimer);
    if (savedTokens() && RELOAD_MS > 0) reloadTimer = setTimeout(load, RELOAD_MS);
  }
}

function showSignIn(message = "") {
  $("sign-in-panel").hidden = false;
  $("range-panel").hidden = true;
  $("dashboard").hidden = true;
  say(message);
}

function render(summary) {
  $("sign-in-panel").hidden = true;
  $("range-panel").hidden = false;
  $("dashboard").hidden = false;
  $("n-sessions").textContent = summary.sessions;
  $("n-guest").textContent = summary.guestSessions;
  $("n-user").textContent = summary.userSessions;
  $("n-avg").textContent = formatDuration(summary.avgDurationSeconds);
  $("n-p50").textContent = formatDuration(summary.p50DurationSeconds);
  $("n-p90").textContent = formatDuration(summary.p90DurationSeconds);

  const byDay = new Map((summary.byDay ?? []).map((row) => [dayOf(row), row]));
  const days = daysOf($("from").value, $("to").value);
  const rows = days.length ? days : [...byDay.keys()].sort();
  stackedBars(
    $("chart-per-day"),
    rows.map((day) => {
      const row = byDay.get(day) ?? {};
      const guest = row.guestSessions ?? 0;
      const user = row.userSessions ?? 0;
      // A summary without the split still shows the day's total.
      const rest = Math.max(0, (row.sessions ?? guest + user) - guest - user);
      return {
        label: day.slice(5),
        segments: [
          { value: guest, className: "guest", title: "guest" },
          { value: user, className: "user", title: "signed in" },
          { value: rest, className: "total", title: "sessions" },
        ],
      };
    }),
    { emptyMessage: "No closed sessions in this range" },
  );
  horizontalBars(
    $("chart-durations"),
    summary.sessions > 0
      ? [
          { label: "p50", value: summary.p50DurationSeconds ?? 0, className: "p50" },
          { label: "average", value: summary.avgDurationSeconds ?? 0, className: "avg" },
          { label: "p90", value: summary.p90DurationSeconds ?? 0, className: "p90" },
        ].map((item) => ({ ...item, text: formatDuration(item.value) }))
      : [],
    {
      emptyMessage:
        summary.sessions > 0 ? "Every session lasted under a second" : "No durations yet",
    },
  );
  donut(
    $("chart-guest-user"),
    [
      { label: "guest", value: summary.guestSessions ?? 0, className: "guest" },
      { label: "signed in", value: summary.userSessions ?? 0, className: "user" },
    ],
    { emptyMessage: "No sessions yet" },
  );
}

function dayOf(row) {
  return String(row.day ?? row.date ?? "").slice(0, 10);
}

function mountDashboardSignIn() {
  mountSignIn({
    say,
    developerPhone: DEVELOPER_PHONE,
    // Development only (the button shows where PIN_DEV_CODES=1): let this number's user read
    // the dashboard before it signs in.
    beforeDeveloperSignIn: (phoneNumber) =>
      requestJson("/dev/dev-stats/viewers", { method: "POST", body: { phoneNumber } }),
    onSignedIn: async (tokens) => {
      saveTokens({ accessToken: tokens.accessToken, refreshToken: tokens.refreshToken });
      await load();
    },
  });
}

async function signOut() {
  const tokens = savedTokens();
  saveTokens(null);
  clearTimeout(reloadTimer);
  if (tokens) await logout(tokens.accessToken).catch(() => {});
  showSignIn("Signed out.");
}

mountDashboardSignIn();
$("range-form").addEventListener("submit", (event) => {
  event.preventDefault();
  load();
});
$("sign-out").addEventListener("click", signOut);
defaultRange();
load();

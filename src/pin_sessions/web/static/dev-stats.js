// The dev-stats dashboard: signs a developer in, reads the summary and the open sessions,
// draws three charts and offers the range as CSV. Days are UTC days, as the API counts them.
import { donut, formatDuration, histogram, stackedBars } from "/static/charts.js";
import { ApiError, logout, mountSignIn, refreshTokens, requestJson } from "/static/sign-in.js";

const TOKENS_KEY = "pin.devStats.tokens";
// The number "Sign in as developer" uses when none is typed.
const DEVELOPER_PHONE = "+15550100100";
const DAY_MS = 24 * 60 * 60 * 1000;
// Ranges people think in; each of the summary's fine buckets falls in the range holding its
// last second, so a session of exactly 10 min counts as "10 min" (a bucket is at most 1/65 of
// its duration wide, so a range's edge blurs by that little).
const DURATION_BINS = [
  [0, "<10 s"], [10, "10 s"], [30, "30 s"], [60, "1 min"], [120, "2 min"], [300, "5 min"],
  [600, "10 min"], [900, "15 min"], [1800, "30 min"], [3600, "1 h"], [7200, "≥2 h"],
];
const params = new URLSearchParams(location.search);
// New sessions reach the summary as they close, so the page re-reads it now and then.
const RELOAD_MS = Number(params.get("reloadMs") ?? 15_000);

const $ = (id) => document.getElementById(id);
let reloadTimer = null;
let shown = null; // the summary on screen, for the CSV export and redraws

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

/** Today's UTC day, on the page from the start (the note says which day "today" is). */
function showToday() {
  const today = isoDay(new Date());
  $("utc-today").textContent = today;
  return today;
}

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
  const headers = { Authorization: `Bearer ${tokens.accessToken}` };
  const [summary, open] = await Promise.all([
    requestJson(`/api/dev-stats/sessions/summary?${query}`, { headers }),
    // Live sessions are user-activity's to count: dev-stats hears of a session when it ends.
    requestJson("/api/user-activity/sessions/open-count", { headers }),
  ]);
  return { ...summary, openSessions: open.openSessions };
}

/** Read the summary with the saved tokens (refreshed when `refresh` or when expired). */
async function load({ refresh = false } = {}) {
  let tokens = savedTokens();
  if (!tokens) return showSignIn();
  if ($("dashboard").hidden) say("Loading the sessions…");
  try {
    let summary;
    try {
      if (refresh) throw new ApiError(401, null); // a new token carries new permissions
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
    if (error instanceof ApiError && error.status === 403) return showNoPermission();
    say(error.message, { error: true });
  } finally {
    clearTimeout(reloadTimer);
    if (savedTokens() && RELOAD_MS > 0 && !$("dashboard").hidden) {
      reloadTimer = setTimeout(load, RELOAD_MS);
    }
  }
}

/** One panel at a time: the sign-in, the no-permission notice, or the dashboard. */
function showPanel(panel) {
  $("sign-in-panel").hidden = panel !== "sign-in";
  $("no-permission").hidden = panel !== "no-permission";
  $("range-panel").hidden = panel !== "dashboard";
  $("dashboard").hidden = panel !== "dashboard";
}

function showSignIn(message = "") {
  showPanel("sign-in");
  say(message);
}

function showNoPermission() {
  showPanel("no-permission");
  say("");
}

function render(summary) {
  showPanel("dashboard");
  shown = summary;
  $("n-open").textContent = summary.openSessions;
  $("n-sessions").textContent = summary.sessions;
  $("n-guest").textContent = summary.guestSessions;
  $("n-user").textContent = summary.userSessions;
  // A range without sessions has no durations: a dash, not a made-up "0 s".
  const duration = (seconds) => (summary.sessions && seconds != null ? formatDuration(seconds) : "—");
  $("n-avg").textContent = duration(summary.avgDurationSeconds);
  $("n-p50").textContent = duration(summary.p50DurationSeconds);
  $("n-p90").textContent = duration(summary.p90DurationSeconds);

  const today = showToday();
  const byDay = new Map((summary.byDay ?? []).map((row) => [dayOf(row), row]));
  const rows = rangeDays();
  stackedBars(
    $("chart-per-day"),
    rows.map((day) => {
      const row = byDay.get(day) ?? {};
      const guest = row.guestSessions ?? 0;
      const user = row.userSessions ?? 0;
      // A summary without the split still shows the day's total.
      const rest = Math.max(0, (row.sessions ?? guest + user) - guest - user);
      return {
        label: day === today ? "today" : day.slice(5),
        marked: day === today,
        segments: [
          { value: guest, className: "guest", title: "guest" },
          { value: user, className: "user", title: "signed in" },
          { value: rest, className: "total", title: "sessions" },
        ],
      };
    }),
    { emptyMessage: "No closed sessions in this range" },
  );
  histogram($("chart-durations"), durationBins(summary.durationHistogram ?? []), {
    emptyMessage: "No durations yet",
  });
  donut(
    $("chart-guest-user"),
    [
      { label: "guest", value: summary.guestSessions ?? 0, className: "guest" },
      { label: "signed in", value: summary.userSessions ?? 0, className: "user" },
    ],
    { emptyMessage: "No sessions yet" },
  );
}

function rangeDays() {
  const days = daysOf($("from").value, $("to").value);
  return days.length ? days : (shown?.byDay ?? []).map(dayOf).sort();
}

function durationBins(buckets) {
  const bins = DURATION_BINS.map(([from, label]) => ({ from, label, value: 0 }));
  for (const bucket of buckets) {
    const bin = bins.findLast((candidate) => candidate.from <= bucket.toSeconds);
    bin.value += bucket.sessions;
  }
  return bins;
}

/** The range as CSV: one row per UTC day, quiet days included. */
function exportCsv() {
  if (!shown) return;
  const byDay = new Map((shown.byDay ?? []).map((row) => [dayOf(row), row]));
  const lines = ["date_utc,sessions,guest_sessions,user_sessions,avg_duration_seconds"];
  for (const day of rangeDays()) {
    const row = byDay.get(day) ?? {};
    const average = row.avgDurationSeconds == null ? "" : row.avgDurationSeconds.toFixed(1);
    lines.push([day, row.sessions ?? 0, row.guestSessions ?? 0, row.userSessions ?? 0, average].join(","));
  }
  const link = document.createElement("a");
  link.href = URL.createObjectURL(new Blob([`${lines.join("\n")}\n`], { type: "text/csv" }));
  link.download = `sessions-${$("from").value}-to-${$("to").value}.csv`;
  link.click();
  setTimeout(() => URL.revokeObjectURL(link.href), 0);
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
$("sign-out-denied").addEventListener("click", signOut);
$("check-again").addEventListener("click", () => load({ refresh: true }));
$("export-csv").addEventListener("click", exportCsv);
// Charts are drawn at the size they take on screen: redraw when that changes (a phone turned),
// only while they are on screen — a redraw shows the dashboard, and by the time the timer
// fires the user may have signed out or the session ended.
let resizeTimer = null;
window.addEventListener("resize", () => {
  clearTimeout(resizeTimer);
  resizeTimer = setTimeout(() => shown && !$("dashboard").hidden && render(shown), 150);
});
defaultRange();
showToday();
load();

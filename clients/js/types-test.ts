// Compiled by `npm run typecheck` only: the README's uses of the API, held to the declarations.
import { createTracker, retryDelay, type Tracker, type TrackerStatus } from "./src/pin-tracker.js";

const tracker: Tracker = createTracker({
  baseUrl: "https://sessions.example",
  requireConsent: true,
  respectDoNotTrack: true,
  maxQueueSize: 50,
});
tracker.consent(true);
const status: TrackerStatus = tracker.status;
void tracker.track("search", { query: "flat" }).then((recorded) => recorded?.actionId);
void tracker.viewStart("0b7f8c3e-6a52-4c1e-9d1a-5f0c2a7e4b11");
void tracker.viewEnd().then((ended) => ended?.durationSeconds.toFixed());
void tracker.link("access-token");
const stopWatching: () => void = tracker.onStatus((now: TrackerStatus) => void now);
stopWatching();
// A caller's own action types: the data is checked against the type.
type ShopActions = { search: { query: string }; "favourite-added": { source: string } };
const shop = createTracker<ShopActions>({ disabled: true, debug: false });
void shop.track("search", { query: "flat" });
// @ts-expect-error: a search carries a query
void shop.track("search", { source: "demo" });
// @ts-expect-error: not one of the shop's action types
void shop.track("checkout");
const disabled: TrackerStatus = "disabled";
tracker.stop();
tracker.optOut();
tracker.optIn();
tracker.forget();
const delay: number = retryDelay(3, 1000, 60000);
export { delay, disabled, status };

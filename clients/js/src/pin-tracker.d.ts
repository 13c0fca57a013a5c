// Type declarations for the tracker (dist/pin-tracker.js; the script-tag build exposes the
// same names on the global `PinTracker`).

export interface TrackerOptions {
  /** Origin of the PIN Sessions API; "" (the default) means the page's own origin. */
  baseUrl?: string;
  /** How often a heartbeat may be sent while the page is visible and in use. Default 60 000. */
  heartbeatIntervalMs?: number;
  /** A user counts as active this long after their last interaction. Default 60 000. */
  interactionWindowMs?: number;
  /** First retry delay of the queue; doubles per failure, with jitter. Default 1 000. */
  retryBaseMs?: number;
  /** Upper bound of the retry delay. Default 60 000. */
  retryMaxMs?: number;
  /** Tries per item on network errors, 408, 425, 429 and 5xx before it is dropped. Default 10. */
  maxAttempts?: number;
  /** Items kept (in memory and in storage); when full, the oldest action or view is dropped. Default 100. */
  maxQueueSize?: number;
  /** Start the session at construction, when allowed. Default true. */
  autoStart?: boolean;
  /** Send and store nothing until `consent(true)` (or `optIn()`). Default false. */
  requireConsent?: boolean;
  /** Send and store nothing when the browser says Do-Not-Track or Global Privacy Control,
   * unless the visitor consents explicitly. Default true. */
  respectDoNotTrack?: boolean;
  /** Inert: sends, stores and schedules nothing; status "disabled". For unit tests (Jest,
   * Vitest under jsdom) and pages that must not track. Default false. */
  disabled?: boolean;
  /** Log each decision and failure to the console, naming the likely cause of a failed
   * cross-origin request (the API's PIN_HTTP__CORS_ORIGINS). Default false. */
  debug?: boolean;
  /** Injectable for tests and non-browser hosts; without a `window` (given or global) the
   * tracker is inert. */
  fetch?: typeof fetch;
  now?: () => number;
  random?: () => number;
  window?: Window;
  document?: Document;
  /** Where the AnonymousId, consent and queue live; null keeps the queue in memory and the id
   * in a cookie. Default localStorage. */
  storage?: Pick<Storage, "getItem" | "setItem" | "removeItem"> & Partial<Pick<Storage, "key" | "length">> | null;
  /** Consistent cross-tab copy of the AnonymousId; null disables it. Default window.indexedDB. */
  indexedDB?: IDBFactory | null;
}

export interface SessionStarted {
  sessionId: string;
  anonymousId: string;
  userId: string | null;
  status: string;
  createdAt: string;
  lastActivityAt: string;
  created: boolean;
}

export interface ActionRecorded {
  actionId: string;
  sessionId: string;
}

export interface ViewStarted {
  viewId: string;
  sessionId: string;
  startedAt: string;
}

export interface ViewEnded {
  viewId: string;
  durationSeconds: number;
}

export interface SessionLinked {
  sessionId: string;
  /** The session's user: the caller's, unless `stale` (then another user's, or null). */
  userId: string | null;
  /** The instant of the sign-in the link stands for; null for a guest's session. */
  linkedAt: string | null;
  switched: boolean;
  /** Present when another user signed in on the device after this token's sign-in: the
   * link changed nothing and the answer is the device's session as it is. */
  stale?: true;
}

export interface TrackerStats {
  ticks: number;
  heartbeats: number;
  finalHeartbeats: number;
  delivered: number;
  dropped: number;
  retries: number;
  pending: number;
}

/**
 * - "tracking": started and allowed; it sends.
 * - "stopped": allowed but not started, or `stop()`ped (or the device forgotten).
 * - "opted-out": the visitor opted out (remembered on the device).
 * - "no-consent": consent is required and not given, or refused.
 * - "do-not-track": the browser asks not to be tracked and the visitor did not consent.
 * - "disabled": created with `disabled: true`: inert, it sends, stores and schedules nothing.
 * - "no-browser": created outside a browser (no `window`, none given): inert likewise.
 */
export type TrackerStatus =
  | "tracking"
  | "stopped"
  | "opted-out"
  | "no-consent"
  | "do-not-track"
  | "disabled"
  | "no-browser";

/** Action types and the data each carries; the default lets any type carry anything. */
export type ActionMap = Record<string, unknown>;

/**
 * Every method that sends something resolves once the API accepted it, or with null
 * when the item was dropped (queue full, refused by the API, out of attempts, or tracking
 * not allowed); it never rejects, and no method throws.
 */
export declare class Tracker<Actions extends ActionMap = ActionMap> {
  constructor(options?: TrackerOptions);
  readonly anonymousId: string | null;
  readonly sessionId: string | null;
  readonly userId: string | null;
  readonly pending: number;
  readonly status: TrackerStatus;
  readonly stats: TrackerStats;
  start(): Promise<SessionStarted | null>;
  /** Record an action; with an action map, `data` is checked against its `type`. */
  track<Type extends keyof Actions & string>(
    type: Type,
    data?: Actions[Type],
    options?: { propertyObjectId?: string },
  ): Promise<ActionRecorded | null>;
  viewStart(propertyObjectId: string): Promise<ViewStarted | null>;
  viewEnd(): Promise<ViewEnded | null>;
  link(accessToken: string): Promise<SessionLinked | null>;
  reset(): Promise<SessionStarted | null>;
  /** Record the visitor's choice; `false` also forgets the device. */
  consent(granted: boolean): void;
  optOut(): void;
  optIn(): void;
  /** Stop and remove every stored id and queued item. */
  forget(): void;
  flush(): Promise<void>;
  /** End timers, retries and requests in flight; nothing is sent until `start()`. */
  stop(): void;
  /** Calls `callback` with the status now and on every change; returns an unsubscribe. */
  onStatus(callback: (status: TrackerStatus) => void): () => void;
}

/** Delay before retry number `attempt` (0-based), in milliseconds. */
export declare function retryDelay(
  attempt: number,
  baseMs: number,
  maxMs: number,
  random?: () => number,
): number;

export declare function createTracker<Actions extends ActionMap = ActionMap>(
  options?: TrackerOptions,
): Tracker<Actions>;

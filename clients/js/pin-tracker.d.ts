// Type declarations for pin-tracker.js.

export interface TrackerOptions {
  /** Origin of the PIN Sessions API; "" (the default) means the page's own origin. */
  baseUrl?: string;
  /** How often a heartbeat may be sent while the page is visible and in use. Default 60 000. */
  heartbeatIntervalMs?: number;
  /** A user counts as active this long after their last interaction. Default 60 000. */
  interactionWindowMs?: number;
  /** First retry delay of the offline queue; doubles per failure. Default 1 000. */
  retryBaseMs?: number;
  /** Upper bound of the retry delay. Default 60 000. */
  retryMaxMs?: number;
  /** Items kept while offline; when full, the oldest action or view is dropped. Default 100. */
  maxQueueSize?: number;
  /** Start the session at construction. Default true. */
  autoStart?: boolean;
  /** Injectable for tests and non-browser hosts. */
  fetch?: typeof fetch;
  now?: () => number;
  random?: () => number;
  window?: Window;
  document?: Document;
  /** Where the AnonymousId lives; null forces the cookie fallback. Default localStorage. */
  storage?: Storage | null;
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
  userId: string;
  linkedAt: string;
  switched: boolean;
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
 * Every method that sends something resolves once the API accepted it, or with null
 * when the item was dropped (queue full, or refused by the API); it never rejects.
 */
export declare class Tracker {
  constructor(options?: TrackerOptions);
  readonly anonymousId: string | null;
  readonly sessionId: string | null;
  readonly userId: string | null;
  readonly pending: number;
  readonly stats: TrackerStats;
  start(): Promise<SessionStarted | null>;
  track(
    type: string,
    data?: unknown,
    options?: { propertyObjectId?: string },
  ): Promise<ActionRecorded | null>;
  viewStart(propertyObjectId: string): Promise<ViewStarted | null>;
  viewEnd(): Promise<ViewEnded | null>;
  link(accessToken: string): Promise<SessionLinked | null>;
  reset(): Promise<SessionStarted | null>;
  flush(): Promise<void>;
  stop(): void;
}

/** Delay before retry number `attempt` (0-based), in milliseconds. */
export declare function retryDelay(
  attempt: number,
  baseMs: number,
  maxMs: number,
  random?: () => number,
): number;

export declare function createTracker(options?: TrackerOptions): Tracker;

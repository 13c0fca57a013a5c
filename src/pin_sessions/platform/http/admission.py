"""Bounded work per process: past so many requests at once, a 503 before any work is done.

An API process serves at most ``PIN_HTTP__MAX_CONCURRENT_REQUESTS`` requests at once. Without
a bound, overload — more asked of a process than its share of the cores answers (a peak, a
machine starved by its neighbours) — slows every request in it alike: answers come after
their clients stopped waiting, the clients ask again, and the process works for nobody. A
refresh is the worst case: one whose client gave up may still rotate its token, and the
client's retry, arriving after ``PIN_REFRESH_REUSE_INTERVAL``, is token reuse and revokes the
family (SPEC §3), signing the user out. Past the bound a request is answered at once with 503
``SERVICE_UNAVAILABLE`` and ``Retry-After`` before any of its work is done — nothing asked of
the database, no token signed or rotated — so its retry is the first attempt again, and the
requests admitted are answered in their time.

A request counts from the moment it has arrived whole (headers and body) until its answer is
sent: a client trickling its body waits on its own clock (``PIN_HTTP__READ_TIMEOUT``), not in
a slot (SPEC §11: thousands of slow clients do not slow the others). The probes (``/healthz``,
``/readyz``, ``/metrics``) are never turned away: an orchestrator must see a busy process
alive, and its operator its metrics.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter

from pin_sessions.platform.errors import ServiceUnavailable

# The probes, answered whatever the load (see above).
UNBOUNDED_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})
# A request turned away is worth asking again about this much later: the requests in
# flight are answered in well under a second when the process keeps within its bound.
RETRY_AFTER_SECONDS = 1


class Overloaded(ServiceUnavailable):
    """The process is serving as many requests as it may; this one was not started."""

    def __init__(self) -> None:
        super().__init__(
            "the service is at its limit of requests at once; retry",
            retry_after=RETRY_AFTER_SECONDS,
        )


class Admission:
    """The count of requests at work in this process, and the bound on it."""

    def __init__(self, limit: int, shed: Counter) -> None:
        self.limit = limit
        self.in_flight = 0
        self._shed = shed

    @classmethod
    def register(cls, limit: int, registry: CollectorRegistry) -> Admission:
        shed = Counter(
            "pin_http_requests_shed_total",
            "Requests answered 503 at once because the process served its limit of requests",
            registry=registry,
        )
        return cls(limit, shed)

    def enter(self) -> bool:
        """Take a place for a request; False (and counted as shed) when none is free."""
        if self.in_flight >= self.limit:
            self._shed.inc()
            return False
        self.in_flight += 1
        return True

    def leave(self) -> None:
        self.in_flight -= 1

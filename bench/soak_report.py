"""From the calls the driver recorded and the fault windows to the SLOs of the soak.

A call belongs to a fault's window when its flight (sent … answered) overlaps the fault
(start … end) or the recovery allowance after it (``recovery`` seconds: the SLO says a
route must answer again within that long). Outside every window:

* no 5xx, and no call left unanswered (timeout, broken connection);
* p99 latency per route below its budget: the heartbeat 50 ms, other writes 100 ms,
  reads 200 ms (scaled by ``budget_scale`` on a machine shared with others);
* no 4xx the scenario does not explain (a driver that sees one has found a defect or has
  one).

The first ``warmup`` seconds (the stretch before the first fault) are judged as the rest for
errors, but their latencies are reported apart and not held to the budgets: a service just
started, beside brokers whose JVMs are still compiling, answers its first burst slowly, and
a soak measures the steady state a long-running service is in. The report shows them.

Inside a window, every failure is a 503 ``application/problem+json`` — but for the
connections of a killed API worker, which break (a load balancer retries those) — and
the first call sent after the fault's end that succeeds is answered within ``recovery``
seconds of that end.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from soak_wire import TIMEOUT, TRANSPORT, Record

HEARTBEAT_BUDGET_MS = 50.0
WRITE_BUDGET_MS = 100.0
READ_BUDGET_MS = 200.0
READ_ROUTES = frozenset(
    {"history", "dev-stats summary", "dev-stats export", "open sessions", "internal link",
     "oauth introspect"}
)  # fmt: skip
# Faults whose window may break connections: the API's own processes.
BREAKS_CONNECTIONS = frozenset({"kill-api-worker"})
SAMPLES = 5
LOCKED = "(locked device)"


@dataclass
class Window:
    """One fault: what it was and when (run seconds); ``skipped`` says why it did not run."""

    name: str
    start: float
    end: float
    detail: str = ""
    skipped: str | None = None
    # A fault of isolation: every call but the locked device's must succeed.
    strict: bool = False

    def covers(self, record: Record, recovery: float) -> bool:
        return self.overlaps(record.sent, record.answered, recovery)

    def overlaps(self, start: float, end: float, recovery: float) -> bool:
        """Whether ``start … end`` meets the fault or the recovery allowance after it."""
        return start <= self.end + recovery and end >= self.start

    def as_json(self) -> dict[str, Any]:
        return {
            "fault": self.name,
            "start": round(self.start, 3),
            "end": round(self.end, 3),
            "seconds": round(self.end - self.start, 3),
            "detail": self.detail,
            "skipped": self.skipped,
        }


def budget_ms(route: str) -> float:
    base = route.removesuffix(" (repeat)").removesuffix(f" {LOCKED}")
    if base == "heartbeat":
        return HEARTBEAT_BUDGET_MS
    return READ_BUDGET_MS if base in READ_ROUTES else WRITE_BUDGET_MS


def percentile(values: Sequence[float], share: float) -> float | None:
    """Nearest-rank percentile of ``values`` (sorted or not); None for none."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 2)


def _failed(record: Record) -> bool:
    return not (isinstance(record.status, int) and 200 <= record.status < 300)


def _unexplained(record: Record) -> bool:
    return _failed(record) and not record.expected


def _describe(record: Record) -> str:
    code = f" {record.code}" if record.code else ""
    return f"{record.route} {record.status}{code} at {record.sent:.2f}s"


def summarize(records: Iterable[Record]) -> dict[str, Any]:
    """Requests, status counts, p50/p99 (ms) of some calls."""
    calls = list(records)
    latencies = [record.latency for record in calls if isinstance(record.status, int)]
    return {
        "requests": len(calls),
        "statuses": dict(sorted(Counter(str(record.status) for record in calls).items())),
        "p50Ms": _ms(percentile(latencies, 0.5)),
        "p99Ms": _ms(percentile(latencies, 0.99)),
    }


def evaluate(
    records: Sequence[Record],
    windows: Sequence[Window],
    *,
    recovery: float,
    budget_scale: float,
    warmup: float = 0.0,
    lags: Sequence[tuple[float, float]] = (),
) -> dict[str, Any]:
    """Per route and per window figures, the SLO verdicts (each with ``holds``) and the
    driver's lag (``lags``: due, seconds late) in all and outside the windows."""
    active = [window for window in windows if window.skipped is None]
    inside: list[list[Record]] = [[] for _ in active]
    outside: list[Record] = []
    for record in records:
        hit = False
        for index, window in enumerate(active):
            if window.covers(record, recovery):
                inside[index].append(record)
                hit = True
        if not hit:
            outside.append(record)

    routes: dict[str, Any] = {}
    by_route: dict[str, list[Record]] = defaultdict(list)
    for record in records:
        by_route[record.route].append(record)
    outside_by_route: dict[str, list[Record]] = defaultdict(list)
    warming_by_route: dict[str, list[Record]] = defaultdict(list)
    for record in outside:
        steady = record.sent >= warmup
        (outside_by_route if steady else warming_by_route)[record.route].append(record)
    over_budget = []
    for route, calls in sorted(by_route.items()):
        clear = summarize(outside_by_route.get(route, []))
        budget = budget_ms(route) * budget_scale
        within = clear["p99Ms"] is None or clear["p99Ms"] < budget
        if not within:
            over_budget.append(f"{route}: p99 {clear['p99Ms']} ms > {budget:g} ms")
        routes[route] = {
            **summarize(calls),
            "outsideWindows": {**clear, "budgetMs": budget, "withinBudget": within},
            "warmUp": summarize(warming_by_route.get(route, [])),
        }

    server_errors = [r for r in outside if _failed(r) and not isinstance(r.status, int)]
    server_errors += [r for r in outside if isinstance(r.status, int) and r.status >= 500]
    client_errors = [
        r
        for r in outside
        if isinstance(r.status, int) and 400 <= r.status < 500 and _unexplained(r)
    ]
    window_reports = []
    bad_in_windows: list[Record] = []
    slow_recoveries = []
    for window, calls in zip(active, inside, strict=True):
        report, bad = _window(window, calls, records, recovery)
        window_reports.append(report)
        bad_in_windows += bad
        if report["recoverySeconds"] is None or report["recoverySeconds"] > recovery:
            slow_recoveries.append(f"{window.name}: {report['recoverySeconds']}")
    # In-window 4xx the scenario does not explain are defects too (counted once).
    client_errors += [r for r in bad_in_windows if isinstance(r.status, int) and r.status < 500]
    bad_in_windows = [
        r for r in bad_in_windows if not (isinstance(r.status, int) and r.status < 500)
    ]
    slo = {
        "no5xxOutsideWindows": _verdict(server_errors),
        "p99WithinBudget": {"holds": not over_budget, "over": over_budget,
                            "budgetScale": budget_scale, "afterWarmUpSeconds": warmup},
        "onlyProblem503InWindows": _verdict(bad_in_windows),
        "recoveryWithinSeconds": {"holds": not slow_recoveries, "seconds": recovery,
                                  "slow": slow_recoveries},
        "noUnexplainedClientErrors": _verdict(client_errors),
    }  # fmt: skip
    return {
        "routes": routes,
        "windows": window_reports + [w.as_json() for w in windows if w.skipped is not None],
        "slo": slo,
        "driverLag": _driver_lag(lags, active, recovery, warmup),
    }


def _driver_lag(
    lags: Sequence[tuple[float, float]], active: Sequence[Window], recovery: float, warmup: float
) -> dict[str, Any]:
    """How late the driver sent its scheduled calls. A latency counts from the send, so a
    driver late outside the windows would hide the service's slowness there (coordinated
    omission); inside a freeze every connection waits and the lag is expected."""
    steady = [
        late
        for due, late in lags
        if due >= warmup and not any(window.overlaps(due, due, recovery) for window in active)
    ]
    return {
        "p99Ms": _ms(percentile([late for _, late in lags], 0.99)),
        "calls": len(lags),
        "outsideWindowsP99Ms": _ms(percentile(steady, 0.99)),
        "outsideWindowsCalls": len(steady),
    }


def _verdict(bad: Sequence[Record]) -> dict[str, Any]:
    return {
        "holds": not bad,
        "count": len(bad),
        "byStatus": dict(Counter(f"{r.route} {r.status} {r.code or ''}".strip() for r in bad)),
        "samples": [_describe(r) for r in bad[:SAMPLES]],
    }


def _window(
    window: Window, calls: list[Record], records: Sequence[Record], recovery: float
) -> tuple[dict[str, Any], list[Record]]:
    """The window's figures, and its calls that failed otherwise than a fault may."""
    allowed_transport = window.name in BREAKS_CONNECTIONS
    bad = []
    for record in calls:
        if not _unexplained(record):
            continue
        if window.strict:
            if LOCKED not in record.route:
                bad.append(record)
            continue
        if record.status == 503 and record.problem:
            continue
        if record.status in (TRANSPORT, TIMEOUT) and allowed_transport:
            continue
        bad.append(record)
    after = [r for r in records if r.sent >= window.end and not _failed(r)]
    first = min((r.answered for r in after), default=None)
    by_route: dict[str, list[Record]] = defaultdict(list)
    for record in calls:
        by_route[record.route].append(record)
    report = {
        **window.as_json(),
        **summarize(calls),
        "recoverySeconds": None if first is None else round(first - window.end, 3),
        "routes": {route: summarize(group) for route, group in sorted(by_route.items())},
        "violations": _verdict(bad),
    }
    return report, bad


def timeline(records: Sequence[Record], step: float) -> dict[str, Any]:
    """Per route, calls per second and p99 (ms) in bins of ``step`` seconds (for the plot)."""
    end = max((record.sent for record in records), default=0.0)
    bins = int(end // step) + 1
    series: dict[str, Any] = {}
    grouped: dict[str, list[list[float]]] = defaultdict(lambda: [[] for _ in range(bins)])
    for record in records:
        if isinstance(record.status, int):
            grouped[record.route][int(record.sent // step)].append(record.latency)
    for route, per_bin in sorted(grouped.items()):
        series[route] = {
            "perSecond": [round(len(values) / step, 2) for values in per_bin],
            "p99Ms": [_ms(percentile(values, 0.99)) for values in per_bin],
        }
    return {"stepSeconds": step, "bins": bins, "routes": series}

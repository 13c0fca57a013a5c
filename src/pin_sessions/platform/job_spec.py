"""What a job declares, and the metric objects the runner makes from it (STYLE 19).

A job is its SQL and its decision; the rest is declared once, as data, and the runner
(:mod:`pin_sessions.platform.jobs`) does it:

* :class:`JobSpec` — the job's name (``pin-sessions job NAME``), its metric prefix, its
  metrics in the order they are registered, and its phases;
* :class:`Phase` — a phase's name (its span, its ``phase done`` line) and its counts;
* :class:`Count` — a number a phase reports: its key in the run's result (``--once``
  JSON, the ``job completed`` line), its field in ``phase done`` (and on the phase's
  span), and the counter (with label values) it adds to as rows commit;
* :class:`Metric` — a counter, gauge or histogram under the prefix. Three names have a
  role the runner plays: ``errors_total`` (required: a failed phase counts there, with
  the phase's ``error_labels``), ``run_duration_ms`` (each run's duration) and ``backlog``
  (what the run's phases left, when each of them could tell). Every ``series`` listed is
  created at once, so a rate or an absence is real from the first scrape.

The names are seed and SPEC names: the tests compare each job's exposition with the one
the deployment's rules and dashboards were written against.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

# Buckets of the jobs' run-duration histograms, in ms: an empty pass to the 2-minute budget.
RUN_DURATION_BUCKETS_MS = (5, 20, 50, 100, 250, 500, 1000, 2500, 5000, 15000, 30000, 60000, 120000)

ERRORS = "errors_total"
RUN_DURATION = "run_duration_ms"
BACKLOG = "backlog"

MetricKind = Literal["counter", "gauge", "histogram"]


@dataclass(frozen=True)
class Metric:
    """One metric, named ``<prefix>_<name>``."""

    kind: MetricKind
    name: str
    help: str
    labels: tuple[str, ...] = ()
    # Label values whose series exist from the start, in the order they are created.
    series: tuple[tuple[str, ...], ...] = ()
    buckets: tuple[float, ...] | None = None


def counter(
    name: str, help: str, *, labels: tuple[str, ...] = (), series: tuple[tuple[str, ...], ...] = ()
) -> Metric:
    return Metric("counter", name, help, labels, series)


def gauge(
    name: str, help: str, *, labels: tuple[str, ...] = (), series: tuple[tuple[str, ...], ...] = ()
) -> Metric:
    return Metric("gauge", name, help, labels, series)


def histogram(
    name: str,
    help: str,
    *,
    buckets: tuple[float, ...],
    labels: tuple[str, ...] = (),
    series: tuple[tuple[str, ...], ...] = (),
) -> Metric:
    return Metric("histogram", name, help, labels, series, buckets)


def errors(
    help: str, *, labels: tuple[str, ...] = (), series: tuple[tuple[str, ...], ...] = ()
) -> Metric:
    """The failed phases' counter, which every job has."""
    return counter(ERRORS, help, labels=labels, series=series)


def run_duration(help: str) -> Metric:
    """Each run's duration in ms, observed by the runner when the run ends."""
    return histogram(RUN_DURATION, help, buckets=RUN_DURATION_BUCKETS_MS)


def backlog(help: str) -> Metric:
    """What the phases left, set by the runner when every phase could tell."""
    return gauge(BACKLOG, help)


@dataclass(frozen=True)
class Count:
    """A number a phase reports; ``name`` is what the job's code calls it."""

    name: str
    # Its key in the run's result (``--once`` JSON).
    key: str
    # Its field in the ``phase done`` line and on the phase's span; None: not there.
    log: str | None = None
    # The counter (a metric's name under the prefix) it adds to, and that counter's labels.
    counter: str | None = None
    labels: tuple[str, ...] = ()
    # The result holds the items themselves (their number still counts), e.g. key ids.
    listed: bool = False


@dataclass(frozen=True)
class Phase:
    name: str
    counts: tuple[Count, ...] = ()
    # The errors counter's label values for this phase, when it has labels.
    error_labels: tuple[str, ...] = ()


@dataclass(frozen=True)
class JobSpec:
    """A job's declaration: see the module's text."""

    name: str
    metric_prefix: str
    metrics: tuple[Metric, ...]
    phases: tuple[Phase, ...]

    def __post_init__(self) -> None:
        metrics = {metric.name: metric for metric in self.metrics}
        if len(metrics) != len(self.metrics):
            raise ValueError(f"{self.name}: a metric is declared twice")
        if ERRORS not in metrics or metrics[ERRORS].kind != "counter":
            raise ValueError(f"{self.name}: every job has an {ERRORS} counter")
        if len({phase.name for phase in self.phases}) != len(self.phases):
            raise ValueError(f"{self.name}: a phase is declared twice")
        keys = [count.key for phase in self.phases for count in phase.counts]
        if len(set(keys)) != len(keys):
            raise ValueError(f"{self.name}: a result key is declared twice")
        for phase in self.phases:
            if len(phase.error_labels) != len(metrics[ERRORS].labels):
                raise ValueError(f"{self.name} {phase.name}: error_labels do not fit {ERRORS}")
            for count in phase.counts:
                target = metrics.get(count.counter or "")
                if count.counter is not None and (
                    target is None
                    or target.kind != "counter"
                    or len(target.labels) != len(count.labels)
                ):
                    raise ValueError(f"{self.name} {phase.name}: {count.name} has no such counter")

    def phase(self, name: str) -> Phase:
        for phase in self.phases:
            if phase.name == name:
                return phase
        raise KeyError(f"{self.name} declares no phase {name!r}")


Collector = Counter | Gauge | Histogram


class JobMetrics:
    """A job's metric objects, registered from its spec in the order it lists them."""

    def __init__(self, spec: JobSpec, registry: CollectorRegistry) -> None:
        self.spec = spec
        self._metrics: dict[str, Collector] = {}
        for metric in spec.metrics:
            collector = _register(spec.metric_prefix, metric, registry)
            for values in metric.series:
                collector.labels(*values)
            self._metrics[metric.name] = collector

    def counter(self, name: str, labels: tuple[str, ...] = ()) -> Counter:
        """The counter ``name`` (or its series for ``labels``)."""
        found = self._metrics[name]
        assert isinstance(found, Counter), name
        return found.labels(*labels) if labels else found

    def gauge(self, name: str, labels: tuple[str, ...] = ()) -> Gauge:
        found = self._metrics[name]
        assert isinstance(found, Gauge), name
        return found.labels(*labels) if labels else found

    def histogram(self, name: str, labels: tuple[str, ...] = ()) -> Histogram:
        found = self._metrics[name]
        assert isinstance(found, Histogram), name
        return found.labels(*labels) if labels else found

    def has(self, name: str) -> bool:
        return name in self._metrics


def _register(prefix: str, metric: Metric, registry: CollectorRegistry) -> Collector:
    name = f"{prefix}_{metric.name}"
    if metric.kind == "counter":
        return Counter(name, metric.help, metric.labels, registry=registry)
    if metric.kind == "gauge":
        return Gauge(name, metric.help, metric.labels, registry=registry)
    assert metric.buckets is not None, f"{name} needs its buckets"
    return Histogram(name, metric.help, metric.labels, registry=registry, buckets=metric.buckets)

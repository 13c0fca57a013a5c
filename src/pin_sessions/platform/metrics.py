"""Prometheus metrics on an injected registry, so tests read their own counters."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.multiprocess import MultiProcessCollector

__all__ = ["CONTENT_TYPE_LATEST", "HttpMetrics", "merged_registry", "new_registry", "render"]


def new_registry() -> CollectorRegistry:
    return CollectorRegistry(auto_describe=True)


def merged_registry(directory: str) -> CollectorRegistry:
    """What ``/metrics`` shows under ``serve --workers N``: every worker's samples merged.

    The workers' metrics live in files under ``directory`` (prometheus-client's
    multiprocess mode, chosen at import by ``PROMETHEUS_MULTIPROC_DIR``, which
    ``serve`` sets for them): counters and histograms are summed, each gauge as its
    ``multiprocess_mode`` says.
    """
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=directory)  # type: ignore[no-untyped-call]
    return registry


def render(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)


@dataclass(frozen=True)
class HttpMetrics:
    """Request counts and latency by route template (never by raw path: ids would explode it)."""

    requests: Counter
    duration: Histogram
    # The labelled children, found once per (method, route, status): ``labels()`` is a
    # locked lookup, and every request of the API passes here.
    _children: dict[tuple[str, str, int], tuple[Any, Any]] = field(default_factory=dict)

    def count(self, method: str, route: str, status: int, seconds: float) -> None:
        """One request served: its count by status, its latency."""
        key = (method, route, status)
        children = self._children.get(key)
        if children is None:
            children = (
                self.requests.labels(method, route, str(status)),
                self.duration.labels(method, route),
            )
            self._children[key] = children
        children[0].inc()
        children[1].observe(seconds)

    @classmethod
    def register(cls, registry: CollectorRegistry) -> HttpMetrics:
        return cls(
            requests=Counter(
                "pin_http_requests_total",
                "HTTP requests served, by route template and status",
                ["method", "route", "status"],
                registry=registry,
            ),
            duration=Histogram(
                "pin_http_request_duration_seconds",
                "HTTP request latency by route template",
                ["method", "route"],
                registry=registry,
                buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
            ),
        )

"""Prometheus metrics on an injected registry, so tests read their own counters."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

__all__ = ["CONTENT_TYPE_LATEST", "HttpMetrics", "new_registry", "render"]


def new_registry() -> CollectorRegistry:
    return CollectorRegistry(auto_describe=True)


def render(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)


@dataclass(frozen=True)
class HttpMetrics:
    """Request counts and latency by route template (never by raw path: ids would explode it)."""

    requests: Counter
    duration: Histogram

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

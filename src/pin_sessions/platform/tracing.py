"""OpenTelemetry: a tracer provider that exports over OTLP only when asked to.

Spans are always created (they carry ``traceparent`` into outbox headers and give
jobs one span per run); they leave the process only when
``OTEL_EXPORTER_OTLP_ENDPOINT`` is set.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

OTLP_ENDPOINT_VARIABLE = "OTEL_EXPORTER_OTLP_ENDPOINT"


def build_tracer_provider(service_role: str, environ: Mapping[str, str]) -> TracerProvider:
    """A provider for one process role (``api``, ``job.expire-sessions``, ...)."""
    provider = TracerProvider(
        resource=Resource.create({"service.name": "pin-sessions", "service.role": service_role})
    )
    if environ.get(OTLP_ENDPOINT_VARIABLE):
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    return provider


def install_tracer_provider(provider: TracerProvider) -> None:
    """Make ``provider`` the process-wide one (done once, by the composition root)."""
    trace.set_tracer_provider(provider)


@contextlib.contextmanager
def process_tracing(service_role: str, environ: Mapping[str, str]) -> Iterator[TracerProvider]:
    """Install a provider for the life of a command; flush its spans when the command ends."""
    provider = build_tracer_provider(service_role, environ)
    install_tracer_provider(provider)
    try:
        yield provider
    finally:
        provider.shutdown()

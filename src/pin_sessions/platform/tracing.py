"""OpenTelemetry: one tracer provider per process, exporting over OTLP only when asked to.

Spans are always created: they carry ``traceparent`` from a request or a job run into
the outbox rows it writes, from there into the Kafka headers, and on to the consumer
that applies the event, so one trace runs from an HTTP request to its last effect. They
leave the process only when ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set.

SQL statements get spans from the asyncpg instrumentation when spans are exported, and
then only inside a trace. Unexported, a statement's span is work nobody reads: on the
routes of a few statements it was 5 to 20 % of the API's CPU (BENCHMARKS.md, "Every hot route
against the floor"), and the trace's context the outbox carries is the request's, not a
statement's. A statement with no span around it (a relay's or a bus consumer's poll,
every ten times a second; a group-committed heartbeat UPDATE) would be a trace of its own,
and those would be most of what is exported while telling nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.instrumentation.asyncpg import AsyncPGInstrumentor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.sampling import (
    ALWAYS_ON,
    Decision,
    ParentBased,
    Sampler,
    SamplingResult,
)
from opentelemetry.trace import Link, SpanKind
from opentelemetry.trace.span import TraceState
from opentelemetry.util.types import Attributes

OTLP_ENDPOINT_VARIABLE = "OTEL_EXPORTER_OTLP_ENDPOINT"
# The asyncpg instrumentation names the database system under the old or the new
# semantic conventions, as OTEL_SEMCONV_STABILITY_OPT_IN says.
_DB_SYSTEM_ATTRIBUTES = ("db.system", "db.system.name")


class NoLoneStatements(Sampler):
    """Root sampler: every root span is kept except a database statement's."""

    def should_sample(
        self,
        parent_context: Context | None,
        trace_id: int,
        name: str,
        kind: SpanKind | None = None,
        attributes: Attributes = None,
        links: Sequence[Link] | None = None,
        trace_state: TraceState | None = None,
    ) -> SamplingResult:
        if kind is SpanKind.CLIENT and any(
            key in (attributes or {}) for key in _DB_SYSTEM_ATTRIBUTES
        ):
            return SamplingResult(Decision.DROP)
        return ALWAYS_ON.should_sample(
            parent_context, trace_id, name, kind, attributes, links, trace_state
        )

    def get_description(self) -> str:
        return "NoLoneStatements"


def exports_spans(environ: Mapping[str, str]) -> bool:
    """Spans leave the process: an OTLP endpoint is set."""
    return bool(environ.get(OTLP_ENDPOINT_VARIABLE))


def build_tracer_provider(service_role: str, environ: Mapping[str, str]) -> TracerProvider:
    """A provider for one process role (``api``, ``job.expire-sessions``, ...)."""
    provider = TracerProvider(
        resource=Resource.create({"service.name": "pin-sessions", "service.role": service_role}),
        sampler=ParentBased(root=NoLoneStatements()),
    )
    if exports_spans(environ):
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    return provider


def install_tracer_provider(provider: TracerProvider, *, trace_statements: bool) -> None:
    """Make ``provider`` the process-wide one, and trace SQL statements under it if asked.

    Done once per process, by the command that runs it (or by a ``serve --workers``
    worker, which is a process of its own).
    """
    trace.set_tracer_provider(provider)
    if trace_statements:
        AsyncPGInstrumentor().instrument(tracer_provider=provider)  # type: ignore[no-untyped-call]


@contextlib.contextmanager
def process_tracing(service_role: str, environ: Mapping[str, str]) -> Iterator[TracerProvider]:
    """Install a provider for the life of a command; flush its spans when the command ends."""
    provider = build_tracer_provider(service_role, environ)
    install_tracer_provider(provider, trace_statements=exports_spans(environ))
    try:
        yield provider
    finally:
        provider.shutdown()

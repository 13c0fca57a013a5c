"""SQL statements get spans only when spans leave the process (platform/tracing.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.instrumentation.asyncpg import AsyncPGInstrumentor

from pin_sessions.platform.tracing import OTLP_ENDPOINT_VARIABLE, process_tracing


@pytest.fixture
def instrumentor() -> Iterator[AsyncPGInstrumentor]:
    instrumentor = AsyncPGInstrumentor()  # type: ignore[no-untyped-call]
    assert not instrumentor.is_instrumented_by_opentelemetry
    yield instrumentor
    if instrumentor.is_instrumented_by_opentelemetry:
        instrumentor.uninstrument()


def test_unexported_spans_leave_statements_untraced(instrumentor: AsyncPGInstrumentor) -> None:
    with process_tracing("test", {}):
        assert not instrumentor.is_instrumented_by_opentelemetry


def test_exported_spans_trace_statements(instrumentor: AsyncPGInstrumentor) -> None:
    # Nothing listens there; no span is made, so nothing is sent.
    with process_tracing("test", {OTLP_ENDPOINT_VARIABLE: "http://127.0.0.1:9"}):
        assert instrumentor.is_instrumented_by_opentelemetry

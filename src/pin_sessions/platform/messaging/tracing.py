"""Spans of delivery: the relay's publish and a consumer's processing, in the writer's trace.

The outbox row keeps the ``traceparent`` of the span that wrote it (a request, a job
run). The relay's publish span is that span's child and travels on as the Kafka
record's ``traceparent``; a consumer's span is the child of whatever the message
carries — the publish span on Kafka, the writer's span on the PostgreSQL bus — so one
trace runs from the request to the consumer's effect, its SQL included.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from opentelemetry import propagate
from opentelemetry.trace import Span, SpanKind, StatusCode, Tracer, set_span_in_context

from pin_sessions.platform.messaging.envelope import TRACEPARENT, Message


def publish_span(tracer: Tracer, message: Message) -> Span:
    """Started when the record is handed to the producer; the caller ends it on the report."""
    return tracer.start_span(
        f"publish {message.topic}",
        context=propagate.extract(message.trace_headers),
        kind=SpanKind.PRODUCER,
        attributes={
            "messaging.system": "kafka",
            "messaging.operation.type": "send",
            "messaging.destination.name": message.topic,
            "messaging.message.id": str(message.message_id),
        },
    )


def record_headers(message: Message, span: Span) -> dict[str, str | bytes | None]:
    """The record's headers: the metadata, and the publish span as its ``traceparent``."""
    carrier: dict[str, str] = {}
    propagate.inject(carrier, context=set_span_in_context(span))
    headers: dict[str, str | bytes | None] = {**message.headers()}
    if TRACEPARENT in carrier:
        headers[TRACEPARENT] = carrier[TRACEPARENT]
    return headers


def end_publish_span(span: Span, error: object | None) -> None:
    if error is not None:
        span.set_status(StatusCode.ERROR, str(error))
    span.end()


@contextmanager
def process_span(tracer: Tracer, consumer: str, message: Message) -> Iterator[Span]:
    """The span of one message's application, current while its statements run.

    A failure marks it with the error's type alone: a driver's message may quote values.
    """
    with tracer.start_as_current_span(
        f"process {message.topic}",
        context=propagate.extract(message.trace_headers),
        kind=SpanKind.CONSUMER,
        attributes={
            "messaging.operation.type": "process",
            "messaging.destination.name": message.topic,
            "messaging.consumer.group.name": consumer,
            "messaging.message.id": str(message.message_id),
        },
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        try:
            yield span
        except Exception as exc:
            span.set_status(StatusCode.ERROR, type(exc).__name__)
            raise

"""One trace from an HTTP request to the consumer's effect, across real processes (SPEC §7).

``serve``, ``relay`` and ``consume dev-stats-session-ended`` run as the command line runs
them, exporting over OTLP to a receiver the test starts. A link that takes a device from
one user to another ends the first user's session in that request; the session-ended
event travels through the outbox (and Kafka) to the dev-stats consumer, which records
its fact. Every span on that path — the request, its SQL, the relay's publish, the
consumer's processing and its SQL — must carry the request's trace id.
"""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import httpx
import pytest

from tests.conftest import TEST_SECRET_KEY
from tests.identity.flows import bearer, sign_in
from tests.platform.messaging.pipeline import KAFKA
from tests.support.kafka import KafkaCluster
from tests.support.otlp import OtlpReceiver, ReceivedSpan
from tests.support.processes import free_port, pin_sessions, wait_until_ready
from tests.support.waiting import wait_until

LINK = "POST /api/user-activity/sessions/link"


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as receiver:
        yield receiver


def _env(database_url: str, tmp_path: Path, receiver: OtlpReceiver) -> dict[str, str]:
    return {
        "PIN_DATABASE_URL": database_url,
        "PIN_DATA_DIR": str(tmp_path / "data"),
        "PIN_SECRET_KEY": TEST_SECRET_KEY,
        "PIN_DEV_CODES": "1",
        "PIN_LOG_FORMAT": "json",
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
        # Export within a tenth of a second instead of the SDK's five.
        "OTEL_BSP_SCHEDULE_DELAY": "100",
    }


async def _ended_by_a_link(api: str) -> str:
    """A device signed in by one user, then linked to another: the first session ends."""
    device = {"X-Anonymous-Id": str(uuid.uuid4())}
    async with httpx.AsyncClient(base_url=api, timeout=10) as http:
        first, second = await sign_in(http), await sign_in(http)
        started = await http.post(
            "/api/user-activity/sessions/start", headers={**device, **bearer(first)}
        )
        assert started.status_code == 200, started.text
        linked = await http.post(
            "/api/user-activity/sessions/link", headers={**device, **bearer(second)}
        )
        assert linked.status_code == 200 and linked.json()["switched"], linked.text
    session_id: str = started.json()["sessionId"]
    return session_id


def _trace_of(spans: list[ReceivedSpan], session_id: str) -> list[ReceivedSpan]:
    """The spans of the trace whose link request ended ``session_id``'s session."""
    consumed = [
        span
        for span in spans
        if span.kind == "SPAN_KIND_CONSUMER"
        and span.role == "consume.dev-stats-session-ended"
        and span.attributes.get("messaging.destination.name")
        == "pin.user-activity.session-ended.v1"
    ]
    for consumer_span in consumed:
        trace = [span for span in spans if span.trace_id == consumer_span.trace_id]
        if any(span.name == LINK for span in trace):
            return trace
    return []


@pytest.mark.parametrize("bus", ["postgres", KAFKA])
async def test_a_request_and_the_consumer_effect_it_causes_are_one_trace(
    bus: str,
    database_url: str,
    tmp_path: Path,
    receiver: OtlpReceiver,
    request: pytest.FixtureRequest,
) -> None:
    env = _env(database_url, tmp_path, receiver)
    roles: list[tuple[str, ...]] = [("consume", "dev-stats-session-ended")]
    if bus == KAFKA:
        broker: KafkaCluster = request.getfixturevalue("kafka_broker")
        env |= broker.env()
        roles.append(("relay",))
    port = free_port()
    processes: list[subprocess.Popen[str]] = []
    logs = tmp_path / "roles.log"
    with logs.open("w") as output:
        try:
            processes.append(pin_sessions("serve", "--port", str(port), env=env, output=output))
            processes += [pin_sessions(*role, env=env, output=output) for role in roles]
            api = f"http://127.0.0.1:{port}"
            wait_until_ready(api, processes[0])
            session_id = await _ended_by_a_link(api)

            async def fact_recorded() -> bool:
                conn = await asyncpg.connect(database_url)
                try:
                    return bool(
                        await conn.fetchval(
                            "select count(*) from dev_stats.session_facts where session_id = $1",
                            uuid.UUID(session_id),
                        )
                    )
                finally:
                    await conn.close()

            await wait_until(fact_recorded, timeout=60, interval=0.2)

            def whole_trace() -> bool:
                trace = _trace_of(receiver.snapshot(), session_id)
                return any(
                    span.role == "consume.dev-stats-session-ended"
                    and span.kind == "SPAN_KIND_CLIENT"
                    for span in trace
                )

            await wait_until(whole_trace, timeout=30, interval=0.2)
        finally:
            for process in processes:
                process.terminate()
            for process in processes:
                process.wait(timeout=30)
    trace = _trace_of(receiver.snapshot(), session_id)
    by_id = {span.span_id: span for span in trace}
    request_span = next(span for span in trace if span.name == LINK)
    assert request_span.kind == "SPAN_KIND_SERVER" and request_span.role == "api"
    # The request's own SQL: the session closed and its event written, inside the request.
    api_sql = [s for s in trace if s.role == "api" and s.kind == "SPAN_KIND_CLIENT"]
    assert any("messaging.outbox" in str(s.attributes.get("db.statement")) for s in api_sql)
    consumer_span = next(s for s in trace if s.kind == "SPAN_KIND_CONSUMER")
    assert consumer_span.attributes["messaging.consumer.group.name"] == "dev-stats-session-ended"
    # The consumer's effect is its child: the fact written in the request's trace.
    effect = [
        s
        for s in trace
        if s.parent_id == consumer_span.span_id
        and "dev_stats.session_facts" in str(s.attributes.get("db.statement"))
    ]
    assert effect, [s.name for s in trace]
    parent = by_id[consumer_span.parent_id]
    if bus == KAFKA:
        # Kafka: the consumer is the child of the relay's publish, itself the child of the
        # span that wrote the outbox row in the request.
        assert (parent.role, parent.kind) == ("relay", "SPAN_KIND_PRODUCER")
        parent = by_id[parent.parent_id]
    assert parent.role == "api"
    # Every span of the trace leads back to the request: one trace, no orphans.
    for span in trace:
        while span.parent_id:
            span = by_id[span.parent_id]
        assert span is request_span

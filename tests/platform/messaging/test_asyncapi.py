"""The AsyncAPI document and the JSON Schemas in contracts/ describe the same topics."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator

from pin_sessions.bootstrap.delivery import CONSUMERS, PUBLISHED_TOPICS
from pin_sessions.platform.messaging.envelope import Message
from pin_sessions.platform.messaging.kafka_admin import PRODUCTION_REPLICATION_FACTOR
from tests.conftest import T0
from tests.support.runtime import unconnected_runtime

ROOT = Path(__file__).resolve().parents[3]
ASYNCAPI = ROOT / "docs" / "asyncapi.json"
CONTRACTS = ROOT / "contracts"


def _document() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(ASYNCAPI.read_text(encoding="utf-8"))
    return loaded


def _schemas() -> dict[str, tuple[Path, dict[str, Any]]]:
    found = {}
    for path in CONTRACTS.glob("*.schema.json"):
        schema = json.loads(path.read_text(encoding="utf-8"))
        found[schema["x-topic"]] = (path, schema)
    return found


def _resolve(document: dict[str, Any], ref: str) -> Any:
    node: Any = document
    for part in ref.removeprefix("#/").split("/"):
        node = node[part]
    return node


def test_every_schema_topic_has_a_channel_with_six_partitions_and_nothing_else() -> None:
    channels = _document()["channels"].values()
    assert {channel["address"] for channel in channels} == set(_schemas())
    # The topics the relay creates and may write (SPEC §11) are exactly these.
    assert {channel["address"] for channel in channels} == set(PUBLISHED_TOPICS)
    assert all(channel["bindings"]["kafka"]["partitions"] == 6 for channel in channels)
    replicas = PRODUCTION_REPLICATION_FACTOR  # what an unset setting gives production's cluster
    assert all(channel["bindings"]["kafka"]["replicas"] == replicas for channel in channels)


def test_each_channel_message_carries_its_topic_schema_and_metadata() -> None:
    document, schemas = _document(), _schemas()
    for channel in document["channels"].values():
        path, schema = schemas[channel["address"]]
        [reference] = channel["messages"].values()
        message = _resolve(document, reference["$ref"])
        # The payload is referenced, never copied, so the two cannot drift apart.
        assert (ASYNCAPI.parent / message["payload"]["$ref"]).resolve() == path.resolve()
        assert message["name"] == schema["x-event-type"]
        assert message["title"] == schema["title"]
        assert message["x-contract-version"] == schema["x-contract-version"]
        assert message["x-aggregate-type"] == schema["x-aggregate-type"]
        assert message["bindings"]["kafka"]["key"]["format"] == "uuid"


def test_each_message_carries_an_example_whose_headers_and_payload_validate() -> None:
    document, schemas = _document(), _schemas()
    headers = document["components"]["messageTraits"]["IntegrationEventHeaders"]["headers"]
    for channel in document["channels"].values():
        _, schema = schemas[channel["address"]]
        [reference] = channel["messages"].values()
        message = _resolve(document, reference["$ref"])
        assert message["examples"], channel["address"]
        for example in message["examples"]:
            Draft202012Validator(schema).validate(example["payload"])
            Draft202012Validator(headers).validate(example["headers"])
            assert example["headers"]["EventType"] == schema["x-event-type"]


def test_the_headers_the_relay_sends_match_the_documented_headers() -> None:
    document = _document()
    headers = document["components"]["messageTraits"]["IntegrationEventHeaders"]["headers"]
    sent = Message(
        message_id=uuid.uuid4(),
        topic="pin.user-activity.session-ended.v1",
        event_type="pin.user-activity.session-ended",
        version=1,
        aggregate_type="Session",
        aggregate_id=str(uuid.uuid4()),
        created_at=T0,
        payload={},
        trace_headers={"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
    ).headers()
    Draft202012Validator(headers).validate(sent)
    assert set(headers["required"]) == set(sent) - {"traceparent"}


def test_every_consumer_of_the_service_is_documented_on_its_topic() -> None:
    document = _document()
    received = {
        _resolve(document, operation["channel"]["$ref"])["address"]
        for operation in document["operations"].values()
        if operation["action"] == "receive"
    }
    assert received == {build(unconnected_runtime()).topic for build in CONSUMERS.values()}

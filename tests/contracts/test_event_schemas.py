"""Every event the code writes matches its JSON Schema in ``contracts/``.

The events come from the real operations — sign-in, logout, link and its force-close,
a view ended by its device, the activity closer, an erasure — read back from the outbox.
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from jsonschema import Draft202012Validator, FormatChecker, ValidationError
from prometheus_client import CollectorRegistry

from pin_sessions.platform.clock import FixedClock
from pin_sessions.platform.ids import new_id
from pin_sessions.platform.runtime import Runtime
from tests.identity.flows import bearer, confirm, dev_code, new_phone, request_code
from tests.user_activity.conftest import device, outbox
from tests.user_activity.jobs.support import close_once

CONTRACTS = Path(__file__).resolve().parents[2] / "contracts"
FORMATS = FormatChecker()
TOPICS = {
    "pin.identity.sign-ins.v1",
    "pin.identity.session-revoked.v1",
    "pin.user-activity.session-linked.v1",
    "pin.user-activity.session-ended.v1",
    "pin.user-activity.property-object-view-ended.v1",
    "pin.identity.user-erased.v1",
}
# The payload field that is the Kafka key (AggregateId) of each topic.
AGGREGATE_FIELD = {
    "pin.identity.sign-ins.v1": "UserId",
    "pin.identity.session-revoked.v1": "RefreshSessionId",
    "pin.user-activity.session-linked.v1": "SessionId",
    "pin.user-activity.session-ended.v1": "SessionId",
    "pin.user-activity.property-object-view-ended.v1": "ViewId",
    "pin.identity.user-erased.v1": "UserId",
}
SESSION_ENDED_FIELDS = {
    "SessionId",
    "AnonymousId",
    "UserId",
    "CreatedAt",
    "LastActivityAt",
    "DurationSeconds",
}
START = "/api/user-activity/sessions/start"
LINK = "/api/user-activity/sessions/link"
VIEWS = "/api/user-activity/property-views"


def schema(topic: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(
        (CONTRACTS / f"{topic}.schema.json").read_text(encoding="utf-8")
    )
    return loaded


def validator(topic: str) -> Draft202012Validator:
    return Draft202012Validator(schema(topic), format_checker=Draft202012Validator.FORMAT_CHECKER)


async def _sign_in(http: httpx.AsyncClient, anonymous_id: uuid.UUID | None) -> dict[str, Any]:
    request_id = await request_code(http, new_phone())
    code = await dev_code(http, request_id)
    headers = {} if anonymous_id is None else {"X-Anonymous-Id": str(anonymous_id)}
    response = await confirm(http, request_id, code, headers=headers)
    assert response.status_code == 200, response.text
    tokens: dict[str, Any] = response.json()
    return tokens


async def _view(http: httpx.AsyncClient, anonymous_id: uuid.UUID, tokens: Any = None) -> str:
    headers = device(anonymous_id)
    if tokens is not None:
        headers.update(bearer(tokens))
    response = await http.post(VIEWS, headers=headers, json={"propertyObjectId": str(new_id())})
    assert response.status_code == 201, response.text
    view_id: str = response.json()["viewId"]
    return view_id


async def _every_kind_of_event(
    http: httpx.AsyncClient, runtime: Runtime, clock: FixedClock
) -> list[dict[str, Any]]:
    """Run each operation that publishes, then return the outbox."""
    phone_device, guest_device = new_id(), new_id()
    first = await _sign_in(http, phone_device)
    second = await _sign_in(http, None)
    # A guest session with a view ended by its device.
    await http.post(START, headers=device(phone_device))
    ended_view = await _view(http, phone_device)
    response = await http.post(f"{VIEWS}/{ended_view}/end", headers=device(phone_device))
    assert response.status_code == 200, response.text
    # Linked to the first user, then force-closed by the second one's link, with a view open.
    await _view(http, phone_device)
    for tokens in (first, second):
        headers = {**device(phone_device), **bearer(tokens)}
        assert (await http.post(LINK, headers=headers)).status_code == 200
    # A guest session with an open view, closed by the closer.
    await _view(http, guest_device)
    response = await http.post("/api/identity/sessions/logout", headers=bearer(first))
    assert response.status_code == 204, response.text
    clock.advance(timedelta(minutes=20))
    assert (await close_once(runtime, CollectorRegistry())).count("closed") == 2
    # A user who erases their account (SPEC §10).
    leaving = await _sign_in(http, None)
    response = await http.delete("/api/identity/me", headers=bearer(leaving))
    assert response.status_code == 204, response.text
    return await outbox(runtime)


@pytest.mark.parametrize("topic", sorted(TOPICS))
def test_each_contract_is_a_valid_closed_schema(topic: str) -> None:
    contract = schema(topic)
    Draft202012Validator.check_schema(contract)
    assert contract["additionalProperties"] is False
    assert set(contract["required"]) == set(contract["properties"])


@pytest.mark.parametrize("topic", sorted(TOPICS))
def test_each_contract_carries_an_example_that_validates(topic: str) -> None:
    contract = schema(topic)
    assert contract["examples"]
    for example in contract["examples"]:
        Draft202012Validator(contract, format_checker=FORMATS).validate(example)


def test_the_contracts_folder_holds_exactly_the_topics() -> None:
    assert {path.name.removesuffix(".schema.json") for path in CONTRACTS.iterdir()} == TOPICS


async def test_every_event_written_matches_its_schema_and_metadata(
    http: httpx.AsyncClient, runtime: Runtime, clock: FixedClock
) -> None:
    events = await _every_kind_of_event(http, runtime, clock)

    assert {event["topic"] for event in events} == TOPICS
    for event in events:
        contract = schema(event["topic"])
        validator(event["topic"]).validate(event["payload"])
        assert event["event_type"] == contract["x-event-type"]
        assert event["version"] == contract["x-contract-version"]
        assert event["aggregate_type"] == contract["x-aggregate-type"]
        assert event["aggregate_id"] == event["payload"][AGGREGATE_FIELD[event["topic"]]]
        for name, value in event["payload"].items():
            if name.endswith("At") and value is not None:
                assert datetime.fromisoformat(value).utcoffset() is not None, (name, value)
    assert len({event["message_id"] for event in events}) == len(events)


async def test_session_ended_carries_exactly_the_seed_004_payload(
    http: httpx.AsyncClient, runtime: Runtime, clock: FixedClock
) -> None:
    events = await _every_kind_of_event(http, runtime, clock)

    ended = [event for event in events if event["topic"] == "pin.user-activity.session-ended.v1"]
    # The first user's session force-closed by the second's link; then the closer's two:
    # the guest session and the second user's.
    assert len(ended) == 3
    assert sorted(event["payload"]["UserId"] is None for event in ended) == [False, False, True]
    for event in ended:
        payload = event["payload"]
        assert set(payload) == SESSION_ENDED_FIELDS
        assert type(payload["DurationSeconds"]) is int and payload["DurationSeconds"] >= 0
        forbidden = [
            key
            for key in payload
            if key.startswith("Device") or key in {"EndedAt", "Status", "LinkedAt", "TenantId"}
        ]
        assert forbidden == []


@pytest.mark.parametrize(
    "change",
    [
        pytest.param({"EndedAt": "2026-11-29T12:00:00+00:00"}, id="extra-field"),
        pytest.param({"DurationSeconds": -1}, id="negative-duration"),
        pytest.param({"DurationSeconds": 1.5}, id="fractional-duration"),
        pytest.param({"SessionId": "not-a-uuid"}, id="malformed-id"),
        pytest.param({"CreatedAt": "2026-11-29 12:00"}, id="timestamp-without-offset"),
    ],
)
def test_the_session_ended_schema_refuses_what_the_contract_forbids(
    change: dict[str, Any],
) -> None:
    valid = {
        "SessionId": str(new_id()),
        "AnonymousId": str(new_id()),
        "UserId": None,
        "CreatedAt": "2026-11-29T12:00:00+00:00",
        "LastActivityAt": "2026-11-29T12:04:00+00:00",
        "DurationSeconds": 240,
    }
    validator("pin.user-activity.session-ended.v1").validate(valid)
    with pytest.raises(ValidationError):
        validator("pin.user-activity.session-ended.v1").validate({**valid, **change})

"""Sign-in codes through each SMS provider (SPEC §8), against real HTTP servers speaking the
providers' documented APIs (``tests/support/sms_gateways.py``); no development codes: the
code a test confirms is the one that arrived at the gateway."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import re
import time
from collections.abc import Iterator

import httpx
import pytest
from prometheus_client import CollectorRegistry

from pin_sessions.platform.runtime import Runtime
from tests.conftest import T0, LogCapture
from tests.identity.conftest import ApiWith
from tests.identity.flows import confirm, new_phone, problem_code
from tests.support import sms_gateways
from tests.support.processes import free_port
from tests.support.sms_gateways import (
    SMSRU_API_ID,
    TWILIO_ACCOUNT_SID,
    TWILIO_AUTH_TOKEN,
    TWILIO_FROM,
    WEBHOOK_SECRET,
    Fault,
    GatewayServer,
)

REQUESTS = "/api/identity/sign-in/requests"
PROVIDERS = ["webhook", "twilio", "smsru"]
# Seconds per attempt (PIN_SMS__TIMEOUT) where a test makes the gateway hang, so a hang costs
# little; elsewhere the settings' 5 s (test_settings.py), so an answer slowed by a busy
# machine is not taken for a hang.
TIMEOUT = 1.0
# What a hang or a trickle may take beyond the timeout on a loaded machine: far less than
# the 5 minutes either fault lasts, which a timeout per read (not per attempt) would wait out.
SLACK = 60.0


@pytest.fixture(params=PROVIDERS)
def gateway(request: pytest.FixtureRequest) -> Iterator[GatewayServer]:
    with GatewayServer(request.param) as server:
        yield server


@pytest.fixture
def sms_timeout() -> float | None:
    """PIN_SMS__TIMEOUT for the test; None: the settings' default."""
    return None


@pytest.fixture
def settings_env(
    settings_env: dict[str, str], gateway: GatewayServer, sms_timeout: float | None
) -> dict[str, str]:
    env = {**settings_env, **gateway.settings(), "PIN_DEV_CODES": "0"}
    if sms_timeout is not None:
        env["PIN_SMS__TIMEOUT"] = str(sms_timeout)
    return env


async def sicr_count(runtime: Runtime) -> int:
    async with runtime.database.connection() as conn:
        count: int = await conn.fetchval(
            "select count(*) from identity.sign_in_confirmation_requests"
        )
    return count


def sms_sent(registry: CollectorRegistry, provider: str, outcome: str) -> float:
    value = registry.get_sample_value(
        "identity_sms_sent_total", {"provider": provider, "outcome": outcome}
    )
    return value or 0.0


async def test_the_code_that_arrives_at_the_gateway_signs_the_user_in(
    http: httpx.AsyncClient, gateway: GatewayServer
) -> None:
    phone = new_phone()
    response = await http.post(REQUESTS, json={"phoneNumber": phone})
    assert response.status_code == 201, response.text
    assert (await http.get(f"/dev/sign-in-codes/{response.json()['requestId']}")).status_code == 404

    [received] = gateway.received
    signed_in = await confirm(http, response.json()["requestId"], gateway.last_code())
    assert signed_in.status_code == 200, signed_in.text
    assert gateway.texts == [f"Your PIN sign-in code: {gateway.last_code()}"]
    if gateway.provider == "twilio":
        assert received.form == {"To": phone, "From": TWILIO_FROM, "Body": gateway.texts[0]}
    elif gateway.provider == "smsru":
        assert received.form == {
            "api_id": SMSRU_API_ID,
            "to": phone[1:],
            "msg": gateway.texts[0],
            "json": "1",
        }
    else:
        assert json.loads(received.body) == {
            "to": phone,
            "text": gateway.texts[0],
            "requestId": response.json()["requestId"],
        }


@pytest.mark.parametrize("gateway", ["webhook"], indirect=True)
async def test_the_webhook_is_signed_over_the_timestamp_and_the_exact_body(
    http: httpx.AsyncClient, gateway: GatewayServer
) -> None:
    await http.post(REQUESTS, json={"phoneNumber": new_phone()})
    [received] = gateway.received
    timestamp = received.headers["x-pin-timestamp"]
    assert timestamp == str(int(T0.timestamp()))  # the server's clock, in Unix seconds
    expected = hmac.new(
        WEBHOOK_SECRET.encode(), f"{timestamp}.".encode() + received.body, hashlib.sha256
    ).hexdigest()
    assert received.headers["x-pin-signature"] == f"sha256={expected}"
    assert received.headers["content-type"] == "application/json"
    assert gateway.verified_signatures == [True]
    # The signature binds the body: the same header over another body does not verify.
    tampered = hmac.new(
        WEBHOOK_SECRET.encode(), f"{timestamp}.".encode() + received.body + b" ", hashlib.sha256
    ).hexdigest()
    assert tampered != expected


@pytest.mark.parametrize("gateway", ["webhook"], indirect=True)
async def test_a_webhook_that_refuses_the_signature_is_a_failed_delivery(
    api_with: ApiWith, gateway: GatewayServer
) -> None:
    """The receiver checks the secret: signed with another one, the code is refused there."""
    async with api_with(PIN_SMS__WEBHOOK_SECRET="not-the-gateway-secret") as http:
        response = await http.post(REQUESTS, json={"phoneNumber": new_phone()})
    assert response.status_code == 503
    assert gateway.verified_signatures == [False]


@pytest.mark.parametrize("gateway", ["webhook"], indirect=True)
async def test_the_template_carries_the_code_and_the_webotp_line_ends_the_message(
    api_with: ApiWith, gateway: GatewayServer
) -> None:
    async with api_with(
        PIN_SMS__TEMPLATE="PIN: {code} is your code. Never share {code}.",
        PIN_SMS__WEBOTP_DOMAIN="pin.example.com",
    ) as http:
        response = await http.post(REQUESTS, json={"phoneNumber": new_phone()})
        assert response.status_code == 201
        code = gateway.last_code()
        assert gateway.texts == [
            f"PIN: {code} is your code. Never share {code}.\n\n@pin.example.com #{code}"
        ]
        assert (await confirm(http, response.json()["requestId"], code)).status_code == 200


@pytest.mark.parametrize(
    "faults",
    [
        pytest.param([sms_gateways.status(500), sms_gateways.status(500)], id="500-twice"),
        pytest.param([sms_gateways.status(503), sms_gateways.status(502)], id="5xx-twice"),
    ],
)
async def test_a_gateway_failing_twice_is_503_and_leaves_the_phone_its_limit(
    http: httpx.AsyncClient,
    gateway: GatewayServer,
    runtime: Runtime,
    registry: CollectorRegistry,
    faults: list[Fault],
) -> None:
    phone = new_phone()
    gateway.fail_next(*faults)
    response = await http.post(REQUESTS, json={"phoneNumber": phone})
    assert response.status_code == 503
    assert problem_code(response) == "IDENTITY_CODE_DELIVERY_FAILED"
    assert await sicr_count(runtime) == 0  # withdrawn: nothing half-written
    assert sms_sent(registry, gateway.provider, "failed") == 1
    # The failed request used none of the phone's five.
    for _ in range(5):
        assert (await http.post(REQUESTS, json={"phoneNumber": phone})).status_code == 201
    assert (await http.post(REQUESTS, json={"phoneNumber": phone})).status_code == 429
    assert sms_sent(registry, gateway.provider, "sent") == 5


async def test_one_5xx_is_retried_at_once_and_the_code_still_arrives(
    http: httpx.AsyncClient, gateway: GatewayServer
) -> None:
    gateway.fail_next(sms_gateways.status(500))
    response = await http.post(REQUESTS, json={"phoneNumber": new_phone()})
    assert response.status_code == 201, response.text
    assert len(gateway.received) == 1
    assert (await confirm(http, response.json()["requestId"], gateway.last_code())).is_success


BAD_ANSWERS = {
    "redirect": sms_gateways.redirect(),
    "10MB-declared": sms_gateways.huge(declared=True),
    "10MB-chunked": sms_gateways.huge(declared=False),
    "client-error": sms_gateways.status(400, b'{"code": 21211}'),
    "client-error-nested-json": sms_gateways.nested_json(400),
    "unauthorized": sms_gateways.status(401),
}


@pytest.mark.parametrize("fault", list(BAD_ANSWERS.values()), ids=list(BAD_ANSWERS))
async def test_a_bad_answer_is_503_without_a_retry_and_nothing_is_kept(
    http: httpx.AsyncClient, gateway: GatewayServer, runtime: Runtime, fault: Fault
) -> None:
    gateway.fail_next(fault, fault)
    response = await http.post(REQUESTS, json={"phoneNumber": new_phone()})
    assert response.status_code == 503
    assert problem_code(response) == "IDENTITY_CODE_DELIVERY_FAILED"
    assert await sicr_count(runtime) == 0
    # Not retried and, for the redirect, not followed: the second fault is still queued,
    # so the next request meets it.
    assert (await http.post(REQUESTS, json={"phoneNumber": new_phone()})).status_code == 503
    assert (await http.post(REQUESTS, json={"phoneNumber": new_phone()})).status_code == 201


@pytest.mark.parametrize("gateway", ["twilio", "smsru"], indirect=True)
@pytest.mark.parametrize(
    "fault", [sms_gateways.garbage(), sms_gateways.nested_json()], ids=["html", "nested-json"]
)
async def test_garbage_from_a_provider_whose_answer_means_something_is_503(
    http: httpx.AsyncClient, gateway: GatewayServer, runtime: Runtime, fault: Fault
) -> None:
    gateway.fail_next(fault)
    response = await http.post(REQUESTS, json={"phoneNumber": new_phone()})
    assert response.status_code == 503
    assert await sicr_count(runtime) == 0


@pytest.mark.parametrize("gateway", ["twilio", "smsru"], indirect=True)
async def test_a_number_the_provider_refuses_is_503(
    http: httpx.AsyncClient, gateway: GatewayServer, runtime: Runtime
) -> None:
    phone = new_phone()
    gateway.refused_numbers.add(phone if gateway.provider == "twilio" else phone[1:])
    response = await http.post(REQUESTS, json={"phoneNumber": phone})
    assert response.status_code == 503
    assert problem_code(response) == "IDENTITY_CODE_DELIVERY_FAILED"
    assert await sicr_count(runtime) == 0


@pytest.mark.parametrize("sms_timeout", [TIMEOUT])
@pytest.mark.parametrize(
    "fault", [sms_gateways.hang(), sms_gateways.trickle()], ids=["hang", "trickle"]
)
async def test_a_gateway_that_hangs_or_trickles_is_503_within_the_timeout(
    http: httpx.AsyncClient, gateway: GatewayServer, runtime: Runtime, fault: Fault
) -> None:
    gateway.fail_next(fault, fault)
    started = time.monotonic()
    response = await http.post(REQUESTS, json={"phoneNumber": new_phone()})
    elapsed = time.monotonic() - started
    assert response.status_code == 503
    assert problem_code(response) == "IDENTITY_CODE_DELIVERY_FAILED"
    # One attempt, bounded as a whole: a timeout is not retried, a trickle not waited out.
    assert gateway.attempts == 1
    assert TIMEOUT <= elapsed < TIMEOUT + SLACK
    assert await sicr_count(runtime) == 0


@pytest.mark.parametrize("gateway", ["twilio"], indirect=True)
async def test_a_gateway_nobody_listens_on_is_503(api_with: ApiWith, runtime: Runtime) -> None:
    """Both attempts meet a refused connection."""
    closed = f"http://127.0.0.1:{free_port()}"
    async with api_with(PIN_SMS__TWILIO_BASE_URL=closed) as http:
        response = await http.post(REQUESTS, json={"phoneNumber": new_phone()})
    assert response.status_code == 503
    assert problem_code(response) == "IDENTITY_CODE_DELIVERY_FAILED"
    assert await sicr_count(runtime) == 0


@pytest.mark.parametrize("gateway", ["webhook"], indirect=True)
async def test_a_connection_dropped_before_the_answer_is_retried_at_once(
    api_with: ApiWith,
) -> None:
    """The first connection closes without a word; the retry, on a new one, is taken."""
    hung_up: list[bytes] = []
    taken: list[bytes] = []

    async def hang_up_once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = re.search(rb"(?i)\r\ncontent-length: *(\d+)", head)
        assert length is not None
        body = await reader.readexactly(int(length[1]))
        if hung_up:
            taken.append(body)
            writer.write(b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\n\r\n")
            await writer.drain()
        else:
            hung_up.append(body)
        writer.close()

    server = await asyncio.start_server(hang_up_once, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server, api_with(PIN_SMS__WEBHOOK_URL=f"http://127.0.0.1:{port}/sms") as http:
        response = await http.post(REQUESTS, json={"phoneNumber": new_phone()})
    assert response.status_code == 201, response.text
    # The same message twice: the retry repeats the request, requestId and signature alike.
    assert len(hung_up) == 1 and taken == hung_up


async def test_neither_the_phone_nor_the_code_nor_a_credential_reaches_a_log_line(
    http: httpx.AsyncClient, gateway: GatewayServer, captured_logs: LogCapture
) -> None:
    phone = new_phone()
    before = len(captured_logs.lines())
    ok = await http.post(REQUESTS, json={"phoneNumber": phone})
    gateway.fail_next(sms_gateways.status(500), sms_gateways.status(500))
    failed = await http.post(REQUESTS, json={"phoneNumber": phone})
    assert (ok.status_code, failed.status_code) == (201, 503)
    code = gateway.last_code()
    lines = captured_logs.lines()[before:]

    secrets = [
        phone[1:],
        phone[-9:],
        code,
        TWILIO_AUTH_TOKEN,
        SMSRU_API_ID,
        WEBHOOK_SECRET,
        TWILIO_ACCOUNT_SID,
    ]
    for line in lines:
        record = json.loads(line)
        record.pop("timestamp")
        text = json.dumps(record)
        assert not any(secret in text for secret in secrets), line
    sent = [json.loads(line) for line in lines if "sign-in code sent" in line]
    not_sent = [json.loads(line) for line in lines if "sign-in code not delivered" in line]
    assert [line["provider"] for line in sent] == [gateway.provider]
    assert [line["requestId"] for line in sent] == [ok.json()["requestId"]]
    [warning] = not_sent
    assert warning["reason"] == "status 500"
    # Where a log needs the number, its last two digits tell it apart from others.
    assert warning["phoneMasked"] == "*" * (len(phone) - 2) + phone[-2:]


async def test_every_delivery_is_counted_and_timed_by_provider_and_outcome(
    http: httpx.AsyncClient, gateway: GatewayServer, registry: CollectorRegistry
) -> None:
    assert sms_sent(registry, gateway.provider, "failed") == 0  # present from the start
    await http.post(REQUESTS, json={"phoneNumber": new_phone()})
    gateway.fail_next(sms_gateways.status(500), sms_gateways.status(500))
    await http.post(REQUESTS, json={"phoneNumber": new_phone()})
    assert sms_sent(registry, gateway.provider, "sent") == 1
    assert sms_sent(registry, gateway.provider, "failed") == 1
    assert registry.get_sample_value("identity_sms_send_duration_seconds_count") == 2
    metrics = (await http.get("/metrics")).text
    assert f'identity_sms_sent_total{{outcome="sent",provider="{gateway.provider}"}} 1.0' in (
        metrics
    )

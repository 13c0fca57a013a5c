"""The README's webhook receiver (``docs/examples/sms_webhook_receiver.py``) really works: run
as its own process, it takes the codes PIN Sessions signs and refuses what it did not sign."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from pin_sessions.platform.clock import FixedClock
from tests.identity.conftest import ApiWith
from tests.identity.flows import confirm, new_phone
from tests.support.processes import PROJECT_ROOT, free_port
from tests.support.waiting import wait_until_sync

RECEIVER = PROJECT_ROOT / "docs" / "examples" / "sms_webhook_receiver.py"
SECRET = "the-secret-both-sides-share"
REQUESTS = "/api/identity/sign-in/requests"


@pytest.fixture
def clock() -> FixedClock:
    """Now: the receiver compares the signed timestamp with its own clock."""
    return FixedClock(datetime.now(UTC))


@pytest.fixture
def receiver(tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, str(RECEIVER), str(port)],
        env={"PIN_SMS_WEBHOOK_SECRET": SECRET},
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )

    def listening() -> bool:
        assert process.poll() is None, "the receiver exited"
        with socket.socket() as probe:
            return probe.connect_ex(("127.0.0.1", port)) == 0

    try:
        wait_until_sync(listening, timeout=15)
        yield f"http://127.0.0.1:{port}/pin", process
    finally:
        process.terminate()
        process.wait(timeout=10)


async def test_the_example_receiver_verifies_the_signature_and_passes_the_code_on(
    api_with: ApiWith, clock: FixedClock, receiver: tuple[str, subprocess.Popen[str]]
) -> None:
    url, process = receiver
    assert process.stdout is not None
    gateway = {
        "PIN_DEV_CODES": "0",
        "PIN_SMS__PROVIDER": "webhook",
        "PIN_SMS__WEBHOOK_URL": url,
        "PIN_SMS__WEBHOOK_SECRET": SECRET,
    }
    phone = new_phone()
    async with api_with(**gateway) as http:
        response = await http.post(REQUESTS, json={"phoneNumber": phone})
        assert response.status_code == 201, response.text
        line = await asyncio.wait_for(asyncio.to_thread(process.stdout.readline), timeout=10)
        message = json.loads(line)
        assert (message["to"], message["requestId"]) == (phone, response.json()["requestId"])
        code = message["text"].rsplit(" ", 1)[-1]
        assert (await confirm(http, message["requestId"], code)).status_code == 200

        # Signed a quarter of an hour ago: a replay, refused by the receiver.
        clock.advance(timedelta(minutes=-15))
        stale = await http.post(REQUESTS, json={"phoneNumber": new_phone()})
        assert stale.status_code == 503
        clock.advance(timedelta(minutes=15))
    async with api_with(**{**gateway, "PIN_SMS__WEBHOOK_SECRET": "another-secret"}) as http:
        forged = await http.post(REQUESTS, json={"phoneNumber": new_phone()})
        assert forged.status_code == 503

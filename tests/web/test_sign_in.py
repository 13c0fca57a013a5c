"""The pages' sign-in in real Chromium on a server without development codes: the code comes
by SMS (a webhook gateway the test runs), the user types it, and every answer of the
confirm endpoint reads as a sentence (SPEC §4, §8)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta

import httpx
import pytest
from playwright.async_api import BrowserContext, Page

from pin_sessions.platform.clock import FixedClock
from pin_sessions.platform.ids import new_id
from pin_sessions.platform.permissions import DEV_STATS_VIEW
from pin_sessions.platform.runtime import Runtime
from tests.identity.flows import new_phone
from tests.support import sms_gateways
from tests.support.sms_gateways import GatewayServer

REQUESTS = "/api/identity/sign-in/requests"


@pytest.fixture
def gateway() -> Iterator[GatewayServer]:
    with GatewayServer("webhook") as server:
        yield server


@pytest.fixture
def settings_env(settings_env: dict[str, str], gateway: GatewayServer) -> dict[str, str]:
    """A production-like server: codes only by SMS."""
    return {**settings_env, **gateway.settings(), "PIN_DEV_CODES": "0"}


async def open_page(device: BrowserContext, path: str) -> Page:
    """Load a page and wait until its sign-in form shows."""
    page = await device.new_page()
    await page.goto(path)
    await page.wait_for_selector("#sign-in-form:not([hidden])")
    return page


async def send_code(page: Page, phone: str, gateway: GatewayServer) -> str:
    """Ask for a code on the page; the code the gateway got."""
    before = len(gateway.received)
    await page.fill("#phone", phone)
    await page.click("#send-code")
    await page.wait_for_selector("#code-form:not([hidden])")
    assert len(gateway.received) == before + 1
    return gateway.last_code()


async def submit_code(page: Page, code: str) -> str:
    """Type a code and submit it; what the page then says."""
    await page.fill("#code", code)
    status = page.locator("#status")
    await status.evaluate("element => { element.textContent = ''; }")
    await page.click("#confirm-code")
    await page.wait_for_function("() => document.getElementById('status').textContent !== ''")
    await page.wait_for_function(
        "() => !document.getElementById('status').textContent.endsWith('…')"
    )
    return await status.text_content() or ""


def webhook_bodies(gateway: GatewayServer) -> list[dict[str, str]]:
    return [json.loads(received.body) for received in gateway.received]


def wrong(code: str) -> str:
    return str((int(code) + 1) % 10**6).zfill(6)


async def grant_dashboard(runtime: Runtime, phone: str, now: datetime) -> None:
    async with runtime.database.transaction() as conn:
        user_id = new_id()
        await conn.execute(
            "insert into identity.users (id, phone_number, created_at) values ($1, $2, $3)",
            user_id,
            phone,
            now,
        )
        await conn.execute(
            "insert into identity.user_permissions (user_id, permission, granted_at) "
            "values ($1, $2, $3)",
            user_id,
            DEV_STATS_VIEW,
            now,
        )


async def test_the_dashboard_signs_in_with_the_code_the_user_types_from_the_sms(
    device: BrowserContext, gateway: GatewayServer, runtime: Runtime, clock: FixedClock
) -> None:
    phone = new_phone()
    await grant_dashboard(runtime, phone, clock.now())
    day = clock.now().date()
    page = await open_page(device, f"/dev-stats?from={day}&to={day}&reloadMs=0")
    assert await page.locator("#sign-in").is_hidden()  # no development sign-in here

    code = await send_code(page, phone, gateway)
    assert await page.get_attribute("#code", "autocomplete") == "one-time-code"
    assert "ending " + phone[-2:] in (await page.text_content("#status") or "")
    assert "not right" in await submit_code(page, wrong(code))
    assert await page.locator("#code-form").is_visible()  # a wrong code: try again here
    await page.fill("#code", code)
    await page.click("#confirm-code")
    await page.wait_for_selector("#dashboard:not([hidden])")
    assert await page.text_content("#n-sessions") == "0"


async def test_every_refusal_of_a_code_reads_as_a_sentence_and_a_spent_request_starts_over(
    device: BrowserContext,
    gateway: GatewayServer,
    http: httpx.AsyncClient,
    runtime: Runtime,
    clock: FixedClock,
) -> None:
    phone = new_phone()
    page = await open_page(device, "/demo")

    code = await send_code(page, phone, gateway)
    clock.advance(timedelta(minutes=6))
    assert "expired" in await submit_code(page, code)
    await page.wait_for_selector("#sign-in-form:not([hidden])")  # back to the phone step

    code = await send_code(page, phone, gateway)
    request_id = webhook_bodies(gateway)[-1]["requestId"]
    confirmed = await http.post(
        "/api/identity/sign-in/confirm", json={"requestId": request_id, "code": code}
    )
    assert confirmed.status_code == 200
    assert "already been used" in await submit_code(page, code)
    await page.wait_for_selector("#sign-in-form:not([hidden])")

    code = await send_code(page, phone, gateway)
    async with runtime.database.connection() as conn:
        await conn.execute(
            "delete from identity.sign_in_confirmation_requests where id = $1",
            uuid.UUID(webhook_bodies(gateway)[-1]["requestId"]),
        )
    assert "not known" in await submit_code(page, code)
    await page.wait_for_selector("#sign-in-form:not([hidden])")

    code = await send_code(page, phone, gateway)
    for _ in range(5):
        assert "not right" in await submit_code(page, wrong(code))
    assert "Too many wrong codes" in await submit_code(page, code)
    await page.wait_for_selector("#sign-in-form:not([hidden])")

    code = await send_code(page, phone, gateway)
    assert "linked" in await submit_code(page, code)
    await page.wait_for_function("() => window.pinTracker.userId")

    # Signed out, and the phone's five codes of the quarter hour used (the deleted request
    # no longer counts, so one more elsewhere): the page says when to ask again.
    await page.click("#sign-out")
    assert (await http.post(REQUESTS, json={"phoneNumber": phone})).status_code == 201
    await page.fill("#phone", phone)
    await page.click("#send-code")
    await page.wait_for_selector("#status.error")
    message = await page.text_content("#status") or ""
    assert "Too many codes" in message and "minutes" in message


async def test_an_undelivered_code_says_so_and_leaves_the_phone_step_open(
    device: BrowserContext, gateway: GatewayServer
) -> None:
    page = await open_page(device, "/dev-stats?reloadMs=0")
    gateway.fail_next(sms_gateways.status(500), sms_gateways.status(500))
    await page.fill("#phone", new_phone())
    await page.click("#send-code")
    await page.wait_for_selector("#status.error")
    assert "could not be sent" in (await page.text_content("#status") or "")
    assert await page.locator("#sign-in-form").is_visible()


EXPLAIN = """
async () => {
  const { explain } = await import("/static/sign-in.js");
  const codes = {
    code: [
      [400, "IDENTITY_CONFIRMATION_INVALID_CODE"], [404, "IDENTITY_CONFIRMATION_NOT_FOUND"],
      [409, "IDENTITY_CONFIRMATION_ALREADY_USED"], [410, "IDENTITY_CONFIRMATION_EXPIRED"],
      [429, "IDENTITY_CONFIRMATION_ATTEMPTS_EXCEEDED"], [400, "USER_ACTIVITY_ANONYMOUS_ID_INVALID"],
      [422, "VALIDATION_ERROR"], [413, "PAYLOAD_TOO_LARGE"], [503, "SERVICE_UNAVAILABLE"],
      [0, "NETWORK"],
    ],
    phone: [
      [422, "VALIDATION_ERROR"], [429, "IDENTITY_TOO_MANY_REQUESTS"],
      [503, "IDENTITY_CODE_DELIVERY_FAILED"], [503, "SERVICE_UNAVAILABLE"],
    ],
  };
  const out = [];
  for (const [step, list] of Object.entries(codes)) {
    for (const [status, code] of list) {
      const error = { status, code, retryAfter: 540, message: `HTTP ${status}` };
      out.push({ step, code, ...explain(error, step) });
    }
  }
  return out;
}
"""


async def test_each_error_of_the_sign_in_calls_has_its_own_message(
    device: BrowserContext,
) -> None:
    page = await open_page(device, "/demo")
    explained = await page.evaluate(EXPLAIN)
    by_code = {(item["step"], item["code"]): item for item in explained}
    messages = [item["message"] for item in explained]
    # Every one is a sentence of its own, never the raw status.
    assert all(message.endswith(".") and "HTTP" not in message for message in messages)
    spent = {code for (step, code), item in by_code.items() if step == "code" and item["restart"]}
    assert spent == {
        "IDENTITY_CONFIRMATION_NOT_FOUND",
        "IDENTITY_CONFIRMATION_ALREADY_USED",
        "IDENTITY_CONFIRMATION_EXPIRED",
        "IDENTITY_CONFIRMATION_ATTEMPTS_EXCEEDED",
        "USER_ACTIVITY_ANONYMOUS_ID_INVALID",
    }
    assert "9 minutes" in by_code[("phone", "IDENTITY_TOO_MANY_REQUESTS")]["message"]
    confirm_messages = {
        by_code[("code", code)]["message"]
        for code in (
            "IDENTITY_CONFIRMATION_INVALID_CODE",
            "IDENTITY_CONFIRMATION_NOT_FOUND",
            "IDENTITY_CONFIRMATION_ALREADY_USED",
            "IDENTITY_CONFIRMATION_EXPIRED",
            "IDENTITY_CONFIRMATION_ATTEMPTS_EXCEEDED",
        )
    }
    assert len(confirm_messages) == 5  # SPEC §4's five refusals, each told apart

"""On a development server (PIN_DEV_CODES=1, the ``up`` default) the pages offer the one-click
sign-in with the development code, and the typed-code flow works there too. The one-click
itself is driven by test_dashboard.py and test_tracker.py."""

from __future__ import annotations

import httpx
from playwright.async_api import BrowserContext

from tests.identity.flows import new_phone


async def test_a_dev_server_offers_the_one_click_sign_in_beside_the_typed_code(
    device: BrowserContext, http: httpx.AsyncClient
) -> None:
    page = await device.new_page()
    await page.goto("/demo")
    await page.wait_for_selector("#sign-in:not([hidden])")  # the development one-click
    await page.fill("#phone", new_phone())
    async with page.expect_response("**/api/identity/sign-in/requests") as sent:
        await page.click("#send-code")
    request_id = (await (await sent.value).json())["requestId"]
    await page.wait_for_selector("#code-form:not([hidden])")
    assert await page.get_attribute("#code", "autocomplete") == "one-time-code"

    code = (await http.get(f"/dev/sign-in-codes/{request_id}")).json()["code"]
    await page.fill("#code", code)
    await page.click("#confirm-code")
    await page.wait_for_function("() => window.pinTracker.userId")
    assert await page.locator("#sign-in-forms").is_hidden()
    assert await page.locator("#sign-out").is_visible()

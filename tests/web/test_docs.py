"""``/docs`` in real Chromium: Swagger UI's Authorize takes a user's token and a service's
client credentials, and "Try it out" then calls a user route and an internal route with them.

Screenshots of the Authorize dialog and of each answer are kept in the test's ``tmp_path``,
under pytest's ``--basetemp``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.async_api import BrowserContext, Locator, Page
from prometheus_client import CollectorRegistry

from pin_sessions.bootstrap.api import build_api
from pin_sessions.bootstrap.database import build_runtime
from pin_sessions.bootstrap.identity import build_token_signer
from pin_sessions.identity.clients import ServiceClients
from pin_sessions.platform.clock import FixedClock
from pin_sessions.platform.runtime import Runtime
from pin_sessions.settings import Settings
from tests.support.http import LiveServer
from tests.support.processes import free_port
from tests.support.users import signed_in_user

UNKNOWN_DEVICE = "0b7f8c3e-6a52-4c1e-9d1a-5f0c2a7e4b11"


@pytest.fixture
def docs_port() -> int:
    return free_port()


@pytest.fixture
def settings_env(settings_env: dict[str, str], docs_port: int) -> dict[str, str]:
    """The public URL is the address served, as under ``serve``: Swagger UI sends "Try it
    out" and the token request to the document's server."""
    return settings_env | {"PIN_PUBLIC_URL": f"http://127.0.0.1:{docs_port}"}


@pytest.fixture
def api_url(
    settings: Settings,
    database_url: str,
    clock: FixedClock,
    registry: CollectorRegistry,
    docs_port: int,
) -> Iterator[str]:
    api = build_api(build_runtime(settings, database_url, clock=clock, registry=registry))
    with LiveServer(api, port=docs_port) as url:
        yield url


def operation(page: Page, method: str, path: str) -> Locator:
    """One operation's block in Swagger UI."""
    return page.locator(f".opblock-{method}").filter(
        has=page.locator(f".opblock-summary-path[data-path='{path}']")
    )


async def try_out(page: Page, method: str, path: str, **parameters: str) -> tuple[int, str]:
    """Expand an operation, fill its parameters, execute; the status and Authorization sent."""
    block = operation(page, method, path)
    await block.locator(".opblock-summary").click()
    await block.locator(".try-out__btn").click()
    for name, value in parameters.items():
        await block.locator(f"tr[data-param-name='{name}'] input").fill(value)
    async with page.expect_response(lambda response: path.split("{")[0] in response.url) as sent:
        await block.locator(".execute").click()
    response = await sent.value
    return response.status, await response.request.header_value("authorization") or ""


async def test_authorize_takes_a_user_token_and_client_credentials_and_try_it_out_uses_them(
    device: BrowserContext, runtime: Runtime, tmp_path: Path
) -> None:
    now = runtime.clock.now()
    async with runtime.database.transaction() as conn:
        user = await signed_in_user(conn, build_token_signer(runtime), now=now)
    client, secret = await ServiceClients(runtime.database).create(
        "docs", ["user-activity.internal"], now
    )
    page = await device.new_page()
    await page.goto("/docs")
    await page.click(".auth-wrapper .btn.authorize")
    dialog = page.locator(".dialog-ux .modal-ux")
    bearer = dialog.locator(".auth-container").filter(has_text="bearer")
    oauth2 = dialog.locator(".auth-container").filter(has_text="oauth2")
    assert "http, Bearer" in (await bearer.text_content() or "")
    assert "/oauth/token" in (await oauth2.text_content() or "")
    assert "clientCredentials" in (await oauth2.text_content() or "")
    await page.screenshot(path=tmp_path / "01-authorize-dialog.png", full_page=True)

    await bearer.locator("input").fill(user.access_token)
    await bearer.locator("button.authorize").click()
    await oauth2.locator("input[id^='client_id']").fill(str(client.client_id))
    await oauth2.locator("input[id^='client_secret']").fill(secret)
    # The scope's checkbox is drawn by its label.
    await oauth2.locator("label[for^='user-activity.internal']").click()
    async with page.expect_response("**/oauth/token") as granted:
        await oauth2.locator("button.authorize").click()
    assert (await granted.value).status == 200
    # Swagger UI holds both: each scheme reads "Authorized", its button "Logout".
    for scheme in (bearer, oauth2):
        await scheme.locator("h6", has_text="Authorized").wait_for()
    await page.screenshot(path=tmp_path / "02-authorized.png", full_page=True)
    await dialog.locator("button.close-modal").click()

    status, sent = await try_out(page, "get", "/api/identity/sessions")
    assert (status, sent) == (200, f"Bearer {user.access_token}")
    await page.screenshot(path=tmp_path / "03-user-route.png", full_page=True)

    status, sent = await try_out(
        page, "get", "/internal/sessions/{anonymousId}/link", anonymousId=UNKNOWN_DEVICE
    )
    # Authorized as the service: the device is unknown (404), not the caller (401/403).
    assert status == 404
    assert sent.startswith("Bearer ") and sent != f"Bearer {user.access_token}"
    await page.screenshot(path=tmp_path / "04-internal-route.png", full_page=True)


async def test_an_operation_reads_as_written_and_a_problem_type_opens_its_page(
    device: BrowserContext, tmp_path: Path
) -> None:
    """What an integrator sees: the start operation's summary, description, example body
    and problem codes in /docs; then the page a problem's ``type`` leads to."""
    page = await device.new_page()
    await page.goto("/docs")
    block = operation(page, "post", "/api/user-activity/sessions/start")
    summary = await block.locator(".opblock-summary-description").text_content()
    assert summary == "Start or continue the device's session"
    await block.locator(".opblock-summary").click()
    text = await block.locator(".opblock-body").text_content() or ""
    assert "the service issues the device's" in text
    assert "USER_ACTIVITY_IDEMPOTENCY_KEY_INVALID" in text
    await block.screenshot(path=tmp_path / "01-start-session.png")

    problem = await page.request.post(
        "/api/user-activity/sessions/start", headers={"Idempotency-Key": "x" * 65}
    )
    kind: str = (await problem.json())["type"]
    assert kind.endswith("/problems/USER_ACTIVITY_IDEMPOTENCY_KEY_INVALID")
    await page.goto(kind)
    assert await page.locator("h1").text_content() == "USER_ACTIVITY_IDEMPOTENCY_KEY_INVALID"
    assert "What to do" in (await page.locator("main").text_content() or "")
    await page.screenshot(path=tmp_path / "02-problem-page.png", full_page=True)

"""Every page the service serves loads clean in real Chromium: no console error, no uncaught
exception, no failed request, no answer of 400 or more — on a development server and on one
without development codes.

The pages: ``/demo`` (the tracker demo), ``/dev-stats`` (the sessions dashboard) and ``/docs``
(Swagger UI); :func:`test_these_are_all_the_pages_the_service_serves` keeps the list whole.
What a page may offer (the one-click development sign-in) is rendered into it
(``<body data-dev-codes>``), never probed with a request meant to fail, and each page has
an icon, so the browser's own ``/favicon.ico`` request finds one too.
"""

from __future__ import annotations

import httpx
import pytest
from playwright.async_api import BrowserContext

from tests.web.console import Complaints

PAGES = ("/demo", "/dev-stats", "/docs")
# What shows once each page has done what it does on load.
READY = {
    "/demo": "() => window.pinTracker?.sessionId",
    "/dev-stats": "() => !document.getElementById('sign-in-panel').hidden",
    "/docs": "() => document.querySelector('.swagger-ui .opblock')",
}


@pytest.fixture(params=[True, False], ids=["dev-codes", "no-dev-codes"])
def dev_codes(request: pytest.FixtureRequest) -> bool:
    on: bool = request.param
    return on


@pytest.fixture
def settings_env(settings_env: dict[str, str], dev_codes: bool) -> dict[str, str]:
    return {**settings_env, "PIN_DEV_CODES": "1" if dev_codes else "0"}


async def test_every_page_loads_without_a_console_error_or_a_failed_request(
    device: BrowserContext, http: httpx.AsyncClient, dev_codes: bool
) -> None:
    for path in PAGES:
        page = await device.new_page()
        complaints = Complaints().watch(page)
        await page.goto(path, wait_until="networkidle")
        await page.wait_for_function(READY[path])
        await page.wait_for_load_state("networkidle")
        assert complaints.all() == [], path
        # The icon the page names is served (headless Chromium may not fetch it itself).
        icon = await page.evaluate(
            "() => document.querySelector(\"link[rel~='icon']\")?.getAttribute('href')"
        )
        assert icon is not None, path
        answer = await http.get(icon)
        assert answer.status_code == 200, (path, icon)
        assert answer.headers["content-type"].startswith("image/"), (path, icon)
        await page.close()
    # A page offers the development sign-in exactly where the server has it, without asking.
    page = await device.new_page()
    complaints = Complaints().watch(page)
    await page.goto("/demo")
    assert await page.locator("#sign-in").is_visible() is dev_codes
    assert not [url for url in complaints.error_answers if "/dev/" in url]


async def test_these_are_all_the_pages_the_service_serves(http: httpx.AsyncClient) -> None:
    """Every GET route without parameters, and the root: the HTML ones are PAGES."""
    document = (await http.get("/openapi.json")).json()
    documented = {path for path, operations in document["paths"].items() if "get" in operations}
    candidates = {path for path in documented if "{" not in path} | set(PAGES) | {"/"}
    html = set()
    for path in sorted(candidates):
        answer = await http.get(path)
        if answer.headers.get("content-type", "").startswith("text/html"):
            assert answer.status_code == 200, path
            html.add(path)
    assert html == set(PAGES)
    assert (await http.get("/favicon.ico")).headers["content-type"] == "image/svg+xml"

"""Real headless Chromium against the live API, driven by Playwright.

The browser is the system's Chromium, never one Playwright downloads: Debian's
``chromium-headless-shell`` (``.ci/run`` installs it): the same Blink and V8 without the
browser's own layer (its windows, profiles, extensions), what Playwright itself runs for
headless tests; the whole browser (``chromium``) when only that is installed. The shell spent
45 to 49 s of CPU on ``tests/web`` where the whole browser spent 74 s (BENCHMARKS.md, "The
test suite"). A missing browser fails these tests: it never skips them.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from playwright.async_api import Browser, BrowserContext, async_playwright

# As the machine's own probe runs it: no sandbox as root, and no background traffic to
# hosts a closed network refuses.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
CHROMIUM_CANDIDATES = (
    "/usr/bin/chromium-headless-shell",
    "/usr/bin/chromium",
    "/usr/bin/chromium-browser",
)


@pytest.fixture
def settings_env(settings_env: dict[str, str]) -> dict[str, str]:
    """The pages sign in with development codes, as on ``pin-sessions up``."""
    return {**settings_env, "PIN_DEV_CODES": "1"}


@pytest.fixture
async def http(api_url: str) -> AsyncIterator[httpx.AsyncClient]:
    """The live API the browser uses, over real HTTP: these are the end-to-end tests."""
    async with httpx.AsyncClient(base_url=api_url, timeout=30) as client:
        yield client


@pytest.fixture(scope="session")
def chromium_path() -> str:
    """The Chromium to drive: ``PIN_TEST_CHROMIUM``, else the first system package found."""
    explicit = os.environ.get("PIN_TEST_CHROMIUM")
    candidates = (
        [explicit]
        if explicit
        else [
            *CHROMIUM_CANDIDATES,
            shutil.which("chromium-headless-shell"),
            shutil.which("chromium"),
        ]
    )
    for candidate in candidates:
        if candidate and Path(candidate).is_file():
            return candidate
    pytest.fail(
        "The browser tests need Chromium and none was found "
        f"(looked for {explicit or ', '.join(CHROMIUM_CANDIDATES)}). "
        "Install it with `apt-get install -y chromium-headless-shell`, "
        "or set PIN_TEST_CHROMIUM to a Chromium's path.",
        pytrace=False,
    )


@pytest.fixture(scope="session")
async def browser(chromium_path: str) -> AsyncIterator[Browser]:
    """One Chromium per test process: a launch costs seconds, a context (``device``) does not."""
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=chromium_path, args=CHROMIUM_ARGS, headless=True
        )
        try:
            yield browser
        finally:
            await browser.close()


@pytest.fixture
async def device(browser: Browser, api_url: str) -> AsyncIterator[BrowserContext]:
    """A fresh browser profile for the test (one device: its own localStorage, cookies and
    cache), pointed at the live API."""
    context = await browser.new_context(base_url=api_url)
    context.set_default_timeout(20_000)
    try:
        yield context
    finally:
        await context.close()

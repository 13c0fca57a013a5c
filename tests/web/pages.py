"""What the browser tests do to pages: read the tracker, hide a tab, count requests."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from playwright.async_api import Page, Request, Response

from tests.support.waiting import wait_until

HEARTBEAT_PATH = "/api/user-activity/sessions/heartbeat"
ACTIONS_PATH = "/api/user-activity/actions"


async def tracker(page: Page) -> dict[str, Any]:
    """The demo page's tracker as plain data."""
    state: dict[str, Any] = await page.evaluate(
        """() => ({
            anonymousId: window.pinTracker.anonymousId,
            sessionId: window.pinTracker.sessionId,
            userId: window.pinTracker.userId,
            ...window.pinTracker.stats,
        })"""
    )
    return state


async def open_demo(page: Page, query: str = "") -> dict[str, Any]:
    """Load ``/demo`` and wait until its tracker has started the session."""
    await page.goto(f"/demo{query}")
    await page.wait_for_function("() => window.pinTracker?.sessionId")
    return await tracker(page)


async def wait_for_ticks(page: Page, more: int) -> None:
    """Let the tracker's heartbeat timer fire ``more`` times: proof by its own clock."""
    start = (await tracker(page))["ticks"]
    await page.wait_for_function(
        "target => window.pinTracker.stats.ticks >= target", arg=start + more
    )


async def set_hidden(page: Page, hidden: bool) -> None:
    """Switch the Page Visibility state as a browser does when the tab goes to the background.

    Headless Chromium reports every page as visible whatever its window does, so the tests
    set the state the way the browser would and fire the same ``visibilitychange`` event.
    """
    await page.evaluate(
        """hidden => {
            Object.defineProperty(document, "visibilityState", {
                configurable: true, get: () => (hidden ? "hidden" : "visible"),
            });
            Object.defineProperty(document, "hidden", { configurable: true, get: () => hidden });
            document.dispatchEvent(new Event("visibilitychange"));
        }""",
        hidden,
    )


async def interact(page: Page) -> None:
    """A real (trusted) mouse movement over the page."""
    await page.mouse.move(40, 40)
    await page.mouse.move(80, 60)


@dataclass
class Traffic:
    """Requests a page made to the API, as Chromium's network stack saw them."""

    requests: list[str] = field(default_factory=list)
    responses: list[tuple[str, int]] = field(default_factory=list)

    def watch(self, page: Page) -> Traffic:
        page.on("request", self._request)
        page.on("response", self._response)
        return self

    def _request(self, request: Request) -> None:
        self.requests.append(_path(request.url))

    def _response(self, response: Response) -> None:
        self.responses.append((_path(response.url), response.status))

    def sent(self, path: str) -> int:
        return sum(1 for sent in self.requests if sent == path)

    def accepted(self, path: str) -> int:
        return sum(1 for seen, status in self.responses if seen == path and 200 <= status < 300)

    async def wait_accepted(self, path: str, count: int) -> None:
        """Until ``count`` responses to ``path`` arrived here: Playwright reports network
        events apart from the page's own state, so they may trail what the page shows."""
        await wait_until(lambda: self.accepted(path) >= count, timeout=20)


def _path(url: str) -> str:
    return "/" + url.split("://", 1)[-1].split("/", 1)[-1].split("?", 1)[0]

"""What a page reports going wrong, as its developer tools would show it.

:class:`Complaints` watches a page for console errors (Chromium's "Failed to load resource"
among them), uncaught exceptions and unhandled rejections, requests that failed on the
network, and answers of 400 or more; a clean page has none.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from playwright.async_api import ConsoleMessage, Error, Page, Request, Response


@dataclass
class Complaints:
    """Everything a page complained about since :meth:`watch`."""

    console_errors: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)
    failed_requests: list[str] = field(default_factory=list)
    error_answers: list[str] = field(default_factory=list)

    def watch(self, page: Page) -> Complaints:
        page.on("console", self._console)
        page.on("pageerror", self._page_error)
        page.on("requestfailed", self._request_failed)
        page.on("response", self._response)
        return self

    def _console(self, message: ConsoleMessage) -> None:
        if message.type == "error":
            self.console_errors.append(f"{message.text} ({message.location.get('url')})")

    def _page_error(self, error: Error) -> None:
        self.page_errors.append(str(error))

    def _request_failed(self, request: Request) -> None:
        self.failed_requests.append(f"{request.method} {request.url}: {request.failure}")

    def _response(self, response: Response) -> None:
        if response.status >= 400:
            self.error_answers.append(f"{response.status} {response.request.method} {response.url}")

    def all(self) -> list[str]:
        return [
            *self.console_errors,
            *self.page_errors,
            *self.failed_requests,
            *self.error_answers,
        ]

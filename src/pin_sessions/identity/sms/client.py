"""The one HTTP client of the SMS gateways: a bounded POST with one immediate retry (SPEC §8).

Every gateway call goes through :meth:`GatewayClient.post`, which holds the rules a
gateway's answer cannot bend:

- each attempt is bounded as a whole — connecting, sending, every byte of the answer — by
  the timeout: httpx's own timeouts bound each read, so a server trickling a byte at a
  time would pass them;
- the answer's body is read up to :data:`MAX_ANSWER_BYTES`; a larger one is a failure;
- a redirect is a failure, never followed: a gateway API that redirects is misconfigured,
  and following would hand the code and the credentials to wherever it points;
- one immediate retry on a connection error and on a 5xx; never after a timeout, which
  would double the wait, and might send the code twice (the first may have arrived).

Every failure is :class:`DeliveryFailed` with a short, fixed reason that is safe to log:
never a gateway's own words, which may repeat the phone number or the text.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import httpx

MAX_ANSWER_BYTES = 64 * 1024
USER_AGENT = "pin-sessions"

# Nothing or only part of the exchange happened on a connection that failed: worth one retry.
_CONNECTION_ERRORS = (httpx.NetworkError, httpx.RemoteProtocolError)


class DeliveryFailed(Exception):
    """The gateway did not take the message; ``reason`` is fixed text, safe to log."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class GatewayAnswer:
    """A gateway's answer: neither a 5xx nor a redirect, its body read in full."""

    status: int
    body: bytes

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    def json_object(self) -> dict[str, Any]:
        """The body as a JSON object; anything else is a failed delivery."""
        parsed = parsed_json(self.body)
        if not isinstance(parsed, dict):
            raise DeliveryFailed(f"status {self.status} without a JSON object")
        return parsed


def parsed_json(body: bytes) -> Any:
    """The JSON value of ``body``; None when it is none.

    Nesting deeper than the parser recurses is a RecursionError, not a ValueError: a
    gateway's 64 KiB of ``[`` must fail the delivery, not the request.
    """
    try:
        return json.loads(body)
    except (ValueError, RecursionError):
        return None


class GatewayClient:
    """POSTs to one gateway, each attempt bounded by ``timeout``."""

    def __init__(self, timeout: timedelta) -> None:
        self._seconds = timeout.total_seconds()

    async def post(
        self,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        content: bytes | None = None,
        data: Mapping[str, str] | None = None,
        auth: tuple[str, str] | None = None,
    ) -> GatewayAnswer:
        """Send once, again at once after a connection error or a 5xx; the answer or a failure."""
        # A client per delivery: codes go out a few a second at most, and nothing then
        # outlives the request that sent it. No proxy or certificate settings from the
        # environment either (trust_env): the process reads its environment only once,
        # into its settings.
        async with httpx.AsyncClient(
            timeout=self._seconds,
            follow_redirects=False,
            trust_env=False,
            headers={"User-Agent": USER_AGENT},
        ) as client:
            request = client.build_request("POST", url, headers=headers, content=content, data=data)
            answer = await self._attempt(client, request, auth)
            if answer is None or answer.status >= 500:
                answer = await self._attempt(client, request, auth)
        if answer is None:
            raise DeliveryFailed("connection failed")
        if answer.status >= 500:
            raise DeliveryFailed(f"status {answer.status}")
        if 300 <= answer.status < 400:
            raise DeliveryFailed(f"redirect {answer.status}, not followed")
        return answer

    async def _attempt(
        self, client: httpx.AsyncClient, request: httpx.Request, auth: tuple[str, str] | None
    ) -> GatewayAnswer | None:
        """One attempt's answer; None when the connection failed (worth the retry)."""
        try:
            async with asyncio.timeout(self._seconds):
                response = await client.send(request, auth=auth, stream=True)
                try:
                    body = await _read_bounded(response)
                finally:
                    await response.aclose()
        except (TimeoutError, httpx.TimeoutException):
            raise DeliveryFailed("timed out") from None
        except _CONNECTION_ERRORS:
            return None
        except httpx.HTTPError as exc:
            raise DeliveryFailed(type(exc).__name__) from None
        return GatewayAnswer(response.status_code, body)


async def _read_bounded(response: httpx.Response) -> bytes:
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_ANSWER_BYTES:
        raise DeliveryFailed("answer too large")
    body = bytearray()
    async for chunk in response.aiter_bytes():
        body += chunk
        if len(body) > MAX_ANSWER_BYTES:
            raise DeliveryFailed("answer too large")
    return bytes(body)

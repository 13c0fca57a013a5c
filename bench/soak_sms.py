"""The soak's SMS gateway: a webhook receiver (``PIN_SMS__PROVIDER=webhook``) in the driver's loop.

It does what README "SMS delivery" asks of a receiver — checks ``X-Pin-Signature`` over
``<X-Pin-Timestamp>.<raw body>`` and a fresh timestamp before trusting anything — then
hands the code to whoever waits for that ``requestId``. It runs on the driver's own event
loop (a plain ``asyncio`` server, no framework), so a sign-in waits on a future, not on a
poll, and its CPU is counted with the driver's.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import re
import time

SECRET = "soak-webhook-secret"
PATH = "/sms"
MAX_SKEW_SECONDS = 300
CODE = re.compile(rb"\b(\d{6})\b")


class SmsGateway:
    """``await start()``, then ``await code(request_id, within)`` per sign-in; ``stop()``."""

    def __init__(self) -> None:
        self._codes: dict[str, asyncio.Future[str]] = {}
        self._server: asyncio.Server | None = None
        self.port = 0
        self.received = 0
        self.refused = 0

    def settings(self) -> dict[str, str]:
        return {
            "PIN_SMS__PROVIDER": "webhook",
            "PIN_SMS__WEBHOOK_URL": f"http://127.0.0.1:{self.port}{PATH}",
            "PIN_SMS__WEBHOOK_SECRET": SECRET,
        }

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    def stop(self) -> None:
        if self._server is not None:
            self._server.close()

    async def code(self, request_id: str, within: float) -> str:
        """The code sent for ``request_id`` (it may have arrived before the caller asks)."""
        future = self._future(request_id)
        try:
            return await asyncio.wait_for(asyncio.shield(future), within)
        finally:
            if future.done():
                self._codes.pop(request_id, None)

    def forget(self, request_id: str) -> None:
        self._codes.pop(request_id, None)

    def _future(self, request_id: str) -> asyncio.Future[str]:
        future = self._codes.get(request_id)
        if future is None:
            future = asyncio.get_running_loop().create_future()
            self._codes[request_id] = future
        return future

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError, ValueError):
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                headers = {}
                for line in head[:-4].split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    headers[name.strip().lower()] = value.strip()
                body = await reader.readexactly(int(headers.get(b"content-length", b"0")))
                status = self._take(headers, body)
                writer.write(f"HTTP/1.1 {status} -\r\nContent-Length: 0\r\n\r\n".encode())
                await writer.drain()
        writer.close()

    def _take(self, headers: dict[bytes, bytes], body: bytes) -> int:
        timestamp = headers.get(b"x-pin-timestamp", b"")
        signature = headers.get(b"x-pin-signature", b"").decode("latin-1")
        expected = hmac.new(SECRET.encode(), timestamp + b"." + body, hashlib.sha256).hexdigest()
        fresh = timestamp.isdigit() and abs(time.time() - int(timestamp)) <= MAX_SKEW_SECONDS
        if not fresh or not hmac.compare_digest(signature, f"sha256={expected}"):
            self.refused += 1
            return 401
        message = json.loads(body)
        found = CODE.search(message["text"].encode())
        if found is None:
            self.refused += 1
            return 400
        self.received += 1
        future = self._future(str(message["requestId"]))
        if not future.done():  # a retried delivery carries the same code
            future.set_result(found.group(1).decode())
        return 204

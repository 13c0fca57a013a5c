"""Reading a request on the app's behalf: the body limit, and cancelling work nobody awaits.

The server's ``receive`` is read by a :class:`RequestReader` from the moment a request
arrives, not only when the app asks for its body: body chunks are handed to the app in
order, and the ``http.disconnect`` that follows them (the client closed its connection)
cancels the request's task while no response has started. So a client that gives up
also stops its query (SPEC §9): asyncpg answers a cancelled statement with a cancel
request to the server.

A route that is only ever a short share of work done for many requests at once (the
heartbeat's group-committed UPDATE) has nothing to stop, and a task per request to watch
for the client leaving cost it about 8 % of its CPU (BENCHMARKS.md): with
``read_ahead=False`` the reader hands the server's messages through as the app asks for
them, bounded all the same.

Bodies are bounded: a declared ``Content-Length`` over the limit is refused before a
byte is read, a streamed body as soon as it crosses the limit; either way the app's
``receive`` raises :class:`~pin_sessions.platform.errors.PayloadTooLarge`.

:meth:`RequestReader.arrived` waits for the request to be in whole (its body read, the client
gone, or the body over the limit) before the app is given it, so a request is admitted to
the process's bounded work (``admission``) only once it is the server's to do, never while
its client trickles it. In step, the body is read there and handed to the app as it asks.
"""

from __future__ import annotations

import asyncio
from collections import deque

from starlette.types import Message, Receive, Scope

from pin_sessions.platform.errors import PayloadTooLarge

DISCONNECT: Message = {"type": "http.disconnect"}


class RequestReader:
    """Reads one request's messages for the app (ahead of it, unless told not to), within
    the body limit."""

    def __init__(
        self, scope: Scope, receive: Receive, *, max_body_bytes: int, read_ahead: bool = True
    ) -> None:
        self._receive = receive
        self._limit = max_body_bytes
        self._read_ahead = read_ahead
        self._seen = 0
        self._chunks: deque[Message] = deque()
        self._arrived = asyncio.Event()
        self._whole = asyncio.Event()
        self._too_large = _declared_length(scope) > max_body_bytes
        self._task = asyncio.current_task()
        self._begun = False
        self._cancel_when_asked = False
        self._responding = False
        self.disconnected = False
        self._reader: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._read_ahead and not self._too_large:
            self._reader = asyncio.create_task(self._read(), name="request-reader")

    async def arrived(self) -> None:
        """Until the request is in whole: its last body chunk read, its client gone, or its
        body over the limit (the app's ``receive`` then says which)."""
        if self._too_large:
            return
        if self._reader is not None:
            await self._whole.wait()
            return
        while True:
            message = await self._receive()
            if not self._within_limit(message):
                return
            self._chunks.append(message)
            if message["type"] != "http.request" or not message.get("more_body", False):
                return

    def begin(self) -> None:
        """The app has the request: from now on a disconnect cancels its task. A client that
        left while its request was awaited (:meth:`arrived`) has the app cancelled where it
        asks for the rest of the body, as it would have been waiting for it."""
        self._begun = True
        self._cancel_when_asked = self.disconnected

    def stop(self) -> None:
        if self._reader is not None:
            self._reader.cancel()

    def responding(self) -> None:
        """The response has begun: from now on a disconnect cancels nothing."""
        self._responding = True

    @property
    def response_started(self) -> bool:
        return self._responding

    @property
    def cancelled_the_request(self) -> bool:
        return self.disconnected and not self._responding

    async def receive(self) -> Message:
        """The app's ``receive``: body chunks in order, then ``http.disconnect``."""
        if not self._read_ahead:
            return await self._receive_in_step()
        while not self._chunks:
            if self._too_large:
                raise PayloadTooLarge(f"request body exceeds {self._limit} bytes")
            if self.disconnected:
                if self._cancel_when_asked and self._task is asyncio.current_task():
                    self._cancel_when_asked = False
                    assert self._task is not None
                    self._task.cancel()
                    await asyncio.sleep(0)  # the cancellation lands here
                return DISCONNECT
            self._arrived.clear()
            await self._arrived.wait()
        return self._chunks.popleft()

    async def _receive_in_step(self) -> Message:
        if self._chunks:
            return self._chunks.popleft()  # read by arrived()
        if not self._too_large:
            message = await self._receive()
            if self._within_limit(message):
                return message
        raise PayloadTooLarge(f"request body exceeds {self._limit} bytes")

    def _within_limit(self, message: Message) -> bool:
        self._seen += len(message.get("body", b""))
        if self._seen > self._limit:
            self._too_large = True
        return not self._too_large

    async def _read(self) -> None:
        while True:
            message = await self._receive()
            if message["type"] == "http.disconnect":
                self.disconnected = True
                self._arrived.set()
                self._whole.set()
                if self._begun and not self._responding and self._task is not None:
                    self._task.cancel()
                return
            if not self._within_limit(message):
                # Stop reading: the rest of an oversized body is never buffered.
                self._arrived.set()
                self._whole.set()
                return
            self._chunks.append(message)
            self._arrived.set()
            if not message.get("more_body", False):
                self._whole.set()


def _declared_length(scope: Scope) -> int:
    for name, value in scope["headers"]:
        if name == b"content-length" and value.isdigit():
            return int(value)
    return 0

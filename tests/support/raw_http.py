"""HTTP/1.1 over one plain socket, for tests about the connection itself (keep-alive, hang-ups)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias
from urllib.parse import urlsplit

# A mapping, or (name, value) pairs when a name comes twice.
Headers: TypeAlias = Mapping[str, str] | Sequence[tuple[str, str]]


@dataclass(frozen=True)
class RawResponse:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


class RawConnection:
    """One TCP connection to a live server; requests go one after another on it."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer

    @classmethod
    async def open(cls, base_url: str) -> RawConnection:
        parts = urlsplit(base_url)
        assert parts.hostname is not None and parts.port is not None
        reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
        return cls(reader, writer)

    async def send(
        self, method: str, path: str, *, body: bytes = b"", headers: Headers | None = None
    ) -> None:
        """Each header as given: a list may name one twice, and values go out untrimmed."""
        lines = [f"{method} {path} HTTP/1.1", "Host: test", f"Content-Length: {len(body)}"]
        pairs = headers.items() if isinstance(headers, Mapping) else headers or ()
        lines += [f"{name}: {value}" for name, value in pairs]
        self._writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        await self._writer.drain()

    async def write(self, data: bytes) -> None:
        """Bytes as they are: a request's head, a part of a body."""
        self._writer.write(data)
        await self._writer.drain()

    async def response(self) -> RawResponse:
        status_line = await self._reader.readline()
        if not status_line:
            raise ConnectionError("the server closed the connection")
        status = int(status_line.split()[1])
        headers: dict[str, str] = {}
        while (line := await self._reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode().partition(":")
            headers[name.strip().lower()] = value.strip()
        body = await self._reader.readexactly(int(headers.get("content-length", "0")))
        return RawResponse(status, headers, body)

    async def request(
        self, method: str, path: str, *, body: bytes = b"", headers: Headers | None = None
    ) -> RawResponse:
        await self.send(method, path, body=body, headers=headers)
        return await self.response()

    async def close(self) -> None:
        self._writer.close()
        await self._writer.wait_closed()

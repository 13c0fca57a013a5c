"""A proxy that can cut every connection: PostgreSQL unreachable, for the bus-away case."""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit


class CuttableProxy:
    """Listens on a Unix socket and forwards to the DSN's server (TCP or Unix socket)."""

    def __init__(self, dsn: str) -> None:
        self._dsn = urlsplit(dsn)
        self._port = self._dsn.port or 5432
        self._query = parse_qs(self._dsn.query)
        self._cut = False
        self._writers: set[asyncio.StreamWriter] = set()
        self._server: asyncio.Server | None = None
        self._directory = tempfile.TemporaryDirectory(prefix="pgproxy")

    async def _connect_upstream(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self._dsn.hostname:
            return await asyncio.open_connection(self._dsn.hostname, self._port)
        socket_dir = self._query["host"][0]
        return await asyncio.open_unix_connection(f"{socket_dir}/.s.PGSQL.{self._port}")

    async def start(self) -> str:
        """Listen; returns the DSN that goes through the proxy."""
        directory = Path(self._directory.name)
        self._server = await asyncio.start_unix_server(
            self._accept, path=str(directory / f".s.PGSQL.{self._port}")
        )
        query = {key: values[0] for key, values in self._query.items()}
        query["host"] = str(directory)
        query["port"] = str(self._port)
        user = self._dsn.netloc.rsplit("@", 1)[0] if "@" in self._dsn.netloc else ""
        return urlunsplit(self._dsn._replace(netloc=f"{user}@", query=urlencode(query)))

    def cut(self) -> None:
        self._cut = True
        for writer in list(self._writers):
            writer.transport.abort()

    def restore(self) -> None:
        self._cut = False

    async def close(self) -> None:
        self.cut()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        self._directory.cleanup()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._cut:
            writer.transport.abort()
            return
        up_reader, up_writer = await self._connect_upstream()
        self._writers |= {writer, up_writer}
        try:
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        finally:
            self._writers -= {writer, up_writer}
            writer.transport.abort()
            up_writer.transport.abort()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(OSError, ConnectionError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    writer.transport.abort()

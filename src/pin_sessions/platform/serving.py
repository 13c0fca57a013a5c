"""Running the HTTP API under uvicorn inside a process we control.

uvicorn normally owns SIGINT/SIGTERM; here the process runner owns them, so the API,
the workers and the embedded database stop together and in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Callable, Iterator

import uvicorn
from fastapi import FastAPI


class _QuietSignalsServer(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class ApiServer:
    """uvicorn serving ``app`` on ``host:port`` until :meth:`stop`."""

    def __init__(
        self, app: FastAPI, *, host: str, port: int, sock: socket.socket | None = None
    ) -> None:
        config = uvicorn.Config(
            app,
            host=host,
            port=port,
            log_config=None,
            access_log=False,
            # The client address is decided by PIN_TRUSTED_PROXIES, not by uvicorn.
            proxy_headers=False,
            lifespan="on",
            timeout_graceful_shutdown=3,
        )
        self._server = _QuietSignalsServer(config)
        self._sock = sock

    @property
    def started(self) -> bool:
        return self._server.started

    async def serve(self) -> None:
        await self._server.serve(sockets=[self._sock] if self._sock else None)

    def stop(self) -> None:
        self._server.should_exit = True

    def bound_port(self) -> int:
        for server in self._server.servers:
            for sock in server.sockets:
                port: int = sock.getsockname()[1]
                return port
        raise RuntimeError("server is not listening")


async def wait_started(server: ApiServer, task: asyncio.Task[None]) -> None:
    """Return once uvicorn listens; re-raise if it died first (port taken, lifespan failed)."""
    while not server.started:
        if task.done():
            task.result()
            raise RuntimeError("API server stopped before it started listening")
        await asyncio.sleep(0.02)


class ApiRole:
    """The HTTP API as a role: serves until ``stop``, then drains within uvicorn's grace."""

    name = "api"

    def __init__(self, server: ApiServer, *, on_listening: Callable[[int], None]) -> None:
        self._server = server
        self._on_listening = on_listening

    async def run(self, stop: asyncio.Event) -> None:
        serving = asyncio.create_task(self._server.serve())
        await wait_started(self._server, serving)
        self._on_listening(self._server.bound_port())
        stopping = asyncio.create_task(stop.wait())
        await asyncio.wait([serving, stopping], return_when=asyncio.FIRST_COMPLETED)
        self._server.stop()
        stopping.cancel()
        await serving

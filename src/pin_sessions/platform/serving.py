"""Running the HTTP API under uvicorn inside a process we control.

uvicorn normally owns SIGINT/SIGTERM; here the process runner owns them, so the API,
the workers and the embedded database stop together and in order. A stop goes in three
steps (SPEC §9): ``/readyz`` answers 503 at once; the API keeps serving for the shutdown
delay, so a load balancer that polls it stops sending; then the listener closes and the
requests in flight get the shutdown timeout to finish.

Slow clients (SPEC §11). uvicorn closes a keep-alive connection idle after a response, but
waits for ever on a connection that never sends its request, or sends it a byte at a time:
each holds a file descriptor, and a few thousand hold them all. A request must arrive whole
— headers and body — within ``PIN_HTTP__READ_TIMEOUT`` of the moment the server began to
wait for it (the connection opened, or the previous response ended), or the connection is
closed. The deadline counts the client's time only: none runs while the app works on a
request it has read, nor while the server itself has paused reading (flow control). It
covers every route alike, the heartbeat's fast path included, since it watches the bytes
arrive rather than the app read them.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import structlog
import uvicorn
from fastapi import FastAPI
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from pin_sessions.platform.http.wiring import Readiness, app_services

log = structlog.get_logger(__name__)


class _ReadDeadlineProtocol(HttpToolsProtocol):
    """uvicorn's HTTP/1.1 protocol, closing a connection whose request is late (see above)."""

    read_timeout: float = 30.0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._deadline: asyncio.TimerHandle | None = None
        self._receiving = False
        super().connection_made(transport)  # type: ignore[arg-type]
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def on_message_begin(self) -> None:
        self._receiving = True
        super().on_message_begin()

    def on_message_complete(self) -> None:
        self._receiving = False
        # No cycle before a first request's headers were taken as an upgrade (WebSocket).
        if self.cycle is not None and self.cycle.response_complete:
            self._arm()  # answered before it was all in: the next request is awaited now
        else:
            self._disarm()  # the request is in: the app's time is not the client's
        super().on_message_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        # Waiting again: for a next request, or the rest of one already begun — unless a
        # request read whole meanwhile (pipelined) is what runs now.
        if not self.transport.is_closing() and (self._receiving or self.cycle.response_complete):
            self._arm()

    def _arm(self) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(self.read_timeout, self._late)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _late(self) -> None:
        self._deadline = None
        if self.flow.read_paused:
            self._arm()  # the server stopped reading (a body the app has not taken yet)
        elif not self.transport.is_closing():
            self.transport.close()


def read_deadline_protocol(read_timeout: timedelta) -> type[asyncio.Protocol]:
    """The HTTP protocol class for uvicorn, with ``read_timeout`` (``PIN_HTTP__READ_TIMEOUT``)."""
    return type(
        "ReadDeadlineProtocol",
        (_ReadDeadlineProtocol,),
        {"read_timeout": read_timeout.total_seconds()},
    )


# How every API process runs uvicorn, alone or as one of ``serve --workers N``.
SERVER_OPTIONS: dict[str, Any] = {
    "log_config": None,
    "access_log": False,
    # The client address is decided by PIN_TRUSTED_PROXIES, not by uvicorn.
    "proxy_headers": False,
    "lifespan": "on",
}


def graceful_shutdown_seconds(shutdown_timeout: timedelta) -> int:
    """uvicorn's wait for the requests in flight, in its whole seconds (at least one)."""
    return max(int(shutdown_timeout.total_seconds()), 1)


class _QuietSignalsServer(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class ApiServer:
    """uvicorn serving ``app`` on ``host:port`` until :meth:`stop`."""

    def __init__(
        self,
        app: FastAPI,
        *,
        host: str,
        port: int,
        sock: socket.socket | None = None,
        shutdown_timeout: timedelta = timedelta(seconds=3),
        read_timeout: timedelta = timedelta(seconds=30),
    ) -> None:
        self.readiness: Readiness = app_services(app).readiness
        config = uvicorn.Config(
            app,
            host=host,
            port=port,
            http=read_deadline_protocol(read_timeout),
            timeout_graceful_shutdown=graceful_shutdown_seconds(shutdown_timeout),
            **SERVER_OPTIONS,
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
    """The HTTP API as a role: serves until ``stop``, then leaves rotation and drains."""

    name = "api"

    def __init__(
        self,
        server: ApiServer,
        *,
        on_listening: Callable[[int], None],
        shutdown_delay: timedelta = timedelta(0),
    ) -> None:
        self._server = server
        self._on_listening = on_listening
        self._shutdown_delay = shutdown_delay.total_seconds()

    async def run(self, stop: asyncio.Event) -> None:
        serving = asyncio.create_task(self._server.serve())
        await wait_started(self._server, serving)
        self._on_listening(self._server.bound_port())
        stopping = asyncio.create_task(stop.wait())
        await asyncio.wait([serving, stopping], return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        self._server.readiness.stop()
        if not serving.done() and self._shutdown_delay > 0:
            log.info("draining: /readyz answers 503", closingIn=self._shutdown_delay)
            await asyncio.wait([serving], timeout=self._shutdown_delay)
        self._server.stop()
        await serving

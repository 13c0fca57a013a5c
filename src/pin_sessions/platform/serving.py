"""Running the HTTP API under uvicorn inside a process we control.

uvicorn normally owns SIGINT/SIGTERM; here the process runner owns them, so the API,
the workers and the embedded database stop together and in order. A stop goes in three
steps (SPEC §9): ``/readyz`` answers 503 at once; the API keeps serving for the shutdown
delay, so a load balancer that polls it stops sending; then the listener closes and the
requests in flight get the shutdown timeout to finish.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Callable, Iterator
from datetime import timedelta

import structlog
import uvicorn
from fastapi import FastAPI

from pin_sessions.platform.http.health import Readiness

log = structlog.get_logger(__name__)


# As uvicorn's own listener, and as `serve --workers` has always bound its socket.
LISTEN_BACKLOG = 2048


class CannotListen(RuntimeError):
    """The API's address cannot be bound (taken, not this machine's, not permitted)."""


def listen_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (port 0: any free port), bound before the app
    is built, so the app knows the address it is reached at (SPEC §11: an unset
    ``PIN_PUBLIC_URL`` follows it). The address family follows the host (IPv4 or IPv6)."""
    try:
        family, _, _, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except OSError as exc:
        raise CannotListen(f"cannot listen on {host}:{port}: {exc}") from exc
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(LISTEN_BACKLOG)
    except OSError as exc:
        sock.close()
        raise CannotListen(
            f"cannot listen on {host}:{port}: {exc.strerror or exc}; "
            "choose another with --port or PIN_HTTP__PORT"
        ) from exc
    return sock


def bound_port(sock: socket.socket) -> int:
    port: int = sock.getsockname()[1]
    return port


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
    ) -> None:
        self.readiness: Readiness = app.state.readiness
        config = uvicorn.Config(
            app,
            host=host,
            port=port,
            log_config=None,
            access_log=False,
            # The client address is decided by PIN_TRUSTED_PROXIES, not by uvicorn.
            proxy_headers=False,
            lifespan="on",
            timeout_graceful_shutdown=max(int(shutdown_timeout.total_seconds()), 1),
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

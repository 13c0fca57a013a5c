"""Serving an app to a test: a real uvicorn server on a loopback port, or in process."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from types import TracebackType

import httpx
import uvicorn
from fastapi import FastAPI

from tests.support.waiting import wait_until_sync


class LiveServer:
    """``with LiveServer(app) as url:`` serves ``app`` for the block, then stops it."""

    def __init__(self, app: FastAPI, *, port: int = 0) -> None:
        config = uvicorn.Config(
            app,
            host="127.0.0.1",
            port=port,
            log_config=None,
            access_log=False,
            lifespan="on",
            proxy_headers=False,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="live-server", daemon=True)

    def start(self, timeout: float = 15.0) -> str:
        self._thread.start()

        def started() -> bool:
            if not self._thread.is_alive():
                raise RuntimeError("live server died while starting")
            return bool(self._server.started)

        wait_until_sync(started, timeout=timeout, interval=0.01)
        port = self._server.servers[0].sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    def requests_begun(self) -> int:
        """Requests the server has begun (their headers read) and not yet answered."""
        return len(self._server.server_state.tasks)

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)

    def __enter__(self) -> str:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()


@asynccontextmanager
async def in_process(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """A client calling ``app`` in this process (no socket), with the app's lifespan run."""
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            yield client

"""The floor a route's cost is set against: the bare server answering a fixed body.

A bare ASGI app under uvicorn with the API's server settings (httptools, uvloop, no access
log, one process) that reads each request whole and answers the same small JSON body:
what any route costs at the least on this server. Started by bench/routes.py, which
sends it the same requests as the API in the same run.
"""

from __future__ import annotations

import sys
from typing import Any

# The app as uvicorn imports it (``--factory``), with this folder on its import path.
FLOOR_FACTORY = "floor:floor_app"
FLOOR_BODY = b'{"status":"ok"}'


def floor_app() -> Any:
    """The floor: every request read whole and answered with the same small JSON body."""

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        while (await receive()).get("more_body"):
            pass
        headers = [(b"content-type", b"application/json"), (b"content-length", b"15")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": FLOOR_BODY})

    return app


def floor_command(port: int) -> list[str]:
    """The floor under the API's server settings: uvicorn, httptools, uvloop, one process."""
    return [
        sys.executable, "-m", "uvicorn", FLOOR_FACTORY, "--factory", "--http", "httptools",
        "--loop", "uvloop", "--host", "127.0.0.1", "--port", str(port),
        "--no-access-log", "--log-level", "warning",
    ]  # fmt: skip

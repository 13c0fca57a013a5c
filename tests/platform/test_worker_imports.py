"""A job's, a consumer's or the relay's process never imports the HTTP stack.

Every role's process imports ``pin_sessions.cli`` as it starts; FastAPI, uvicorn and httpx were
0.23 s of the 0.64 s of CPU a worker's imports took, paid at every start of every job,
consumer and relay. Only ``serve`` and ``up`` import the server's stack (``cli/api.py``),
and httpx is imported where codes are sent. A fresh interpreter: this one has imported
everything.
"""

from __future__ import annotations

import json
import subprocess
import sys

HTTP_STACK = ("fastapi", "starlette", "uvicorn", "httpx")

# What `pin-sessions job …`, `relay` and `consume …` import before they run.
WORKER_IMPORTS = (
    "pin_sessions.cli",
    "pin_sessions.bootstrap.jobs",
    "pin_sessions.bootstrap.delivery",
    "pin_sessions.bootstrap.keys",
    "pin_sessions.bootstrap.identity",
)


def imported_of(modules: tuple[str, ...]) -> list[str]:
    code = (
        "import importlib, json, sys\n"
        f"for name in {list(modules)!r}: importlib.import_module(name)\n"
        f"print(json.dumps(sorted(m for m in {list(HTTP_STACK)!r} if m in sys.modules)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    found: list[str] = json.loads(done.stdout)
    return found


def test_the_workers_commands_import_no_http_stack() -> None:
    assert imported_of(WORKER_IMPORTS) == []


def test_the_api_s_commands_do() -> None:
    """The check sees the stack when it is there: what ``serve`` imports when it runs (the
    codes' sender, httpx, comes when the identity operations are built)."""
    modules = ("pin_sessions.cli", "pin_sessions.cli.api", "pin_sessions.identity.sms")
    assert imported_of(modules) == sorted(HTTP_STACK)

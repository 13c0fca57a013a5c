"""Running one or more long-lived roles in a process until SIGINT or SIGTERM.

A role is an object with ``async run(stop)``: it works until ``stop`` is set, then
finishes what it must not cut (a running statement, a chunk) and returns.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Coroutine, Sequence
from typing import Any, Protocol, TypeVar

import structlog
import uvloop

log = structlog.get_logger(__name__)


T = TypeVar("T")


def run_process(main: Coroutine[Any, Any, T]) -> T:
    """Run a long-lived process's ``main`` on uvloop, as uvicorn does when it picks the loop.

    Every role is I/O-bound; asyncio's own selector loop spends markedly more of the CPU on
    the loop itself.
    """
    return uvloop.run(main)


class RoleCannotRun(Exception):
    """What no retry mends (a refused password, a topic the role may not create): the role
    stops, and its process with it, ``str()`` being the one line that says why."""

    exit_status = 1


class Role(Protocol):
    name: str

    async def run(self, stop: asyncio.Event) -> None: ...


async def wait_or_stop(stop: asyncio.Event, seconds: float) -> None:
    """Sleep ``seconds`` unless ``stop`` is set first: how every loop waits between passes."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), timeout=seconds)


def install_stop_signals(stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, _on_signal, stop, signum)


def _on_signal(stop: asyncio.Event, signum: int) -> None:
    log.info("stop requested", signal=signal.Signals(signum).name)
    stop.set()


async def run_roles(roles: Sequence[Role], stop: asyncio.Event, *, grace_seconds: float) -> None:
    """Run every role; when one fails or ``stop`` is set, stop them all within the grace period."""
    tasks = [asyncio.create_task(role.run(stop), name=role.name) for role in roles]
    stop_waiter = asyncio.create_task(stop.wait())
    await asyncio.wait([*tasks, stop_waiter], return_when=asyncio.FIRST_COMPLETED)
    stop.set()
    failed = [task for task in tasks if task.done() and task.exception() is not None]
    _, late = await asyncio.wait(tasks, timeout=grace_seconds)
    for task in late:
        log.warning("role did not stop in time, cancelling", role=task.get_name())
        task.cancel()
    await asyncio.gather(*late, return_exceptions=True)
    stop_waiter.cancel()
    for task in failed:
        exc = task.exception()
        assert exc is not None
        raise exc

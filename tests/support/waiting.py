"""Waiting for a condition with a deadline: a wait that can never end fails instead.

Every polling loop of the suite goes through here; ``pytest-timeout`` catches what is
not a poll (a hung call).
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable

Condition = Callable[[], bool | Awaitable[bool]]


async def wait_until(condition: Condition, *, timeout: float, interval: float = 0.05) -> None:
    """Until ``condition()`` (sync or async) is true; AssertionError after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        outcome = condition()
        if inspect.isawaitable(outcome):
            outcome = await outcome
        if outcome:
            return
        _check(deadline, timeout)
        await asyncio.sleep(interval)


def wait_until_sync(
    condition: Callable[[], bool], *, timeout: float, interval: float = 0.05
) -> None:
    """``wait_until`` for code without an event loop (threads, subprocess drivers)."""
    deadline = time.monotonic() + timeout
    while not condition():
        _check(deadline, timeout)
        time.sleep(interval)


def _check(deadline: float, timeout: float) -> None:
    if time.monotonic() > deadline:
        raise AssertionError(f"condition not met within {timeout} s")

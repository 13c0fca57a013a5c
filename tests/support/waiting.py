"""Waiting for a condition with a deadline: a wait that can never end fails instead."""

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
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        await asyncio.sleep(interval)

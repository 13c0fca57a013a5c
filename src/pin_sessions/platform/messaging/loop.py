"""The loop every delivery role runs: one pass after another until ``stop``."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime

import structlog

from pin_sessions.platform.clock import Clock
from pin_sessions.platform.process import wait_or_stop

log = structlog.get_logger(__name__)


async def run_passes(
    role: str,
    run_once: Callable[[datetime], Awaitable[bool]],
    stop: asyncio.Event,
    clock: Clock,
    *,
    idle_seconds: float,
    max_backoff_seconds: float,
) -> None:
    """Call ``run_once(now)`` until ``stop``; it returns True when more work is already waiting.

    A failed pass is logged and retried with a doubling delay, so a broker or database that is
    away is polled gently and the role carries on once it is back.
    """
    backoff = idle_seconds
    while not stop.is_set():
        try:
            more = await run_once(clock.now())
        except Exception as exc:
            backoff = min(max(backoff * 2, idle_seconds), max_backoff_seconds)
            log.warning("pass failed, retrying", role=role, error=str(exc), retryIn=backoff)
            await wait_or_stop(stop, backoff)
            continue
        backoff = idle_seconds
        if not more:
            await wait_or_stop(stop, idle_seconds)

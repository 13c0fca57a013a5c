"""The loop every delivery role runs: one pass after another until ``stop``."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime

import structlog

from pin_sessions.platform.clock import Clock
from pin_sessions.platform.process import RoleCannotRun, wait_or_stop

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
    away is polled gently and the role carries on once it is back (logged once, with how many
    passes failed). :class:`RoleCannotRun` is not retried: it stops the role.
    """
    backoff = idle_seconds
    failures = 0
    while not stop.is_set():
        try:
            more = await run_once(clock.now())
        except RoleCannotRun:
            raise
        except Exception as exc:
            failures += 1
            backoff = min(max(backoff * 2, idle_seconds), max_backoff_seconds)
            log.warning("pass failed, retrying", role=role, error=str(exc), retryIn=backoff)
            await wait_or_stop(stop, backoff)
            continue
        if failures:
            log.info("pass succeeded again", role=role, failedPasses=failures)
            failures = 0
        backoff = idle_seconds
        if not more:
            await wait_or_stop(stop, idle_seconds)

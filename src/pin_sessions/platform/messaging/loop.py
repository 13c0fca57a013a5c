"""The loop every delivery role runs: one pass after another until ``stop``."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from datetime import datetime

import structlog

from pin_sessions.platform.clock import Clock
from pin_sessions.platform.process import RoleCannotRun, wait_or_stop

log = structlog.get_logger(__name__)

# How long one pass may spend deleting rows every reader has passed before it returns to
# delivering: pruning is housekeeping, and what a pass leaves the next one deletes.
PRUNE_BUDGET_SECONDS = 0.2


def prune_deadline(budget_seconds: float) -> float:
    """The ``time.monotonic()`` instant a pass that starts pruning now stops at."""
    return time.monotonic() + budget_seconds


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

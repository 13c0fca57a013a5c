"""State read from the database and kept in process: the last good copy (SPEC §11).

A process keeps a copy of what every request asks and which changes rarely (the keys that
verify tokens, the disabled service clients). Requests read the copy and never wait on a
refresh of it; :class:`RefreshedCopy` keeps it:

* the first caller reads it (a process that has no copy yet waits for one read, at most
  ``wait_limit``); from then on one task reads it again once the copy is
  ``refresh_after`` old by the injected clock (looked at every :data:`TICK`), one read at
  a time, in the background;
* a read that fails or stalls leaves the copy as it was — a database stall slows no
  request that the copy can answer — and the copy's age, a gauge set every tick, shows it;
* a caller that must see the state as it is now (a token naming a key the copy lacks) may
  ask for a read begun after it asked, bounded the same way. Concurrent callers share one
  read; its failure is theirs at once, not a read each.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Generic, Protocol, TypeVar

import structlog
from prometheus_client import Gauge

from pin_sessions.platform.clock import Clock
from pin_sessions.platform.errors import ServiceUnavailable

log = structlog.get_logger(__name__)

T = TypeVar("T")

# How often the refresher looks at the copy's age (and sets its gauge); a read costs a
# statement only when one is due.
TICK = timedelta(seconds=0.5)


class Refreshing(Protocol):
    """What the process starts with its HTTP app and stops with it."""

    def start(self) -> None: ...

    async def close(self) -> None: ...


@dataclass(frozen=True)
class Copy(Generic[T]):
    value: T
    read_at: datetime  # when the read that made it began, by the injected clock
    number: int  # reads are numbered in the order they began


class RefreshedCopy(Generic[T]):
    """The last good result of ``read``, kept as the module says."""

    def __init__(
        self,
        name: str,
        read: Callable[[], Awaitable[T]],
        *,
        clock: Clock,
        refresh_after: timedelta,
        wait_limit: timedelta,
        age: Gauge,
    ) -> None:
        self._name = name
        self._read = read
        self._clock = clock
        self._refresh_after = refresh_after
        self._wait_limit = wait_limit.total_seconds()
        self._age = age
        self._copy: Copy[T] | None = None
        self._reads_begun = 0
        self._reading: asyncio.Task[Copy[T]] | None = None
        self._refresher: asyncio.Task[None] | None = None
        self._failing = False

    @property
    def current(self) -> Copy[T] | None:
        return self._copy

    def start(self) -> None:
        """Begin refreshing in the background, once there is a copy; idempotent."""
        if self._refresher is None:
            self._refresher = asyncio.create_task(self._refresh(), name=f"refresh {self._name}")

    async def close(self) -> None:
        for task in (self._refresher, self._reading):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        self._refresher = self._reading = None

    async def get(self) -> Copy[T]:
        """The copy; with none yet, the first read's, waited for at most ``wait_limit``."""
        self.start()
        copy = self._copy
        if copy is not None:
            return copy
        async with self._bounded():
            return await asyncio.shield(self._begin_read())

    async def read_now(self) -> Copy[T]:
        """A copy from a read begun after this call, waited for at most ``wait_limit``."""
        self.start()
        wanted = self._reads_begun + 1
        async with self._bounded():
            while True:
                copy = await asyncio.shield(self._begin_read())
                if copy.number >= wanted:
                    return copy

    @contextlib.asynccontextmanager
    async def _bounded(self) -> AsyncIterator[None]:
        try:
            async with asyncio.timeout(self._wait_limit):
                yield
        except TimeoutError as exc:
            raise ServiceUnavailable(f"the {self._name} could not be read in time") from exc

    def _begin_read(self) -> asyncio.Task[Copy[T]]:
        """The read in flight, or a new one: never two at a time."""
        if self._reading is None:
            self._reads_begun += 1
            self._reading = asyncio.create_task(self._read_once(self._reads_begun))
            self._reading.add_done_callback(_retrieve)
        return self._reading

    async def _read_once(self, number: int) -> Copy[T]:
        began = self._clock.now()
        try:
            value = await self._read()
        except Exception as exc:
            if not self._failing:
                # Once per outage, not once per attempt: a stall would repeat it every tick.
                log.warning(
                    "refresh failed; the last good copy stays in use",
                    cache=self._name,
                    errorType=type(exc).__name__,
                )
            self._failing = True
            raise
        finally:
            self._reading = None
        if self._failing:
            log.info("refresh succeeded again", cache=self._name)
            self._failing = False
        copy = Copy(value, began, number)
        # A read that began earlier but ended later never replaces a newer copy.
        if self._copy is None or self._copy.number < number:
            self._copy = copy
        return copy

    async def _refresh(self) -> None:
        while True:
            now = self._clock.now()
            copy = self._copy
            if copy is not None:
                if self._reading is None and self._due(copy, now):
                    self._begin_read()  # not awaited: the tick goes on, and the age with it
                self._age.set(max((now - copy.read_at).total_seconds(), 0.0))
            await asyncio.sleep(TICK.total_seconds())

    def _due(self, copy: Copy[T], now: datetime) -> bool:
        # A clock that went back (or a test's clock set back) reads again too.
        return now - copy.read_at >= self._refresh_after or now < copy.read_at


def _retrieve(task: asyncio.Task[object]) -> None:
    """A background read's failure is logged by the read; nobody need await it."""
    if not task.cancelled():
        task.exception()

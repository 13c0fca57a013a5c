"""The last good copy of shared state (SPEC §11), driven through its ``read`` seam.

The read is a coroutine the test holds or lets go, so each rule is shown without timing:
one read at a time, shared by every caller; a copy never waits on a read; a failed read
fails its waiters once, together, and keeps the copy.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta

import pytest
from prometheus_client import CollectorRegistry, Gauge

from pin_sessions.platform.clock import FixedClock
from pin_sessions.platform.errors import ServiceUnavailable
from pin_sessions.platform.refreshed import RefreshedCopy
from tests.support.waiting import wait_until

REFRESH_AFTER = timedelta(seconds=2)


class HeldRead:
    """A read that returns the next value only when the test lets it go."""

    def __init__(self) -> None:
        self.calls = 0
        self.values: asyncio.Queue[int | Exception] = asyncio.Queue()

    async def __call__(self) -> int:
        self.calls += 1
        value = await self.values.get()
        if isinstance(value, Exception):
            raise value
        return value


@pytest.fixture
def read() -> HeldRead:
    return HeldRead()


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
async def copy(
    read: HeldRead, clock: FixedClock, registry: CollectorRegistry
) -> AsyncIterator[RefreshedCopy[int]]:
    refreshed = RefreshedCopy(
        "numbers",
        read,
        clock=clock,
        refresh_after=REFRESH_AFTER,
        wait_limit=timedelta(seconds=30),
        age=Gauge("numbers_age_seconds", "age", registry=registry),
    )
    yield refreshed
    await refreshed.close()


async def test_callers_without_a_copy_share_one_read(
    copy: RefreshedCopy[int], read: HeldRead
) -> None:
    waiting = [asyncio.create_task(copy.get()) for _ in range(20)]
    await wait_until(lambda: read.calls == 1, timeout=10)
    read.values.put_nowait(7)
    copies = await asyncio.wait_for(asyncio.gather(*waiting), timeout=10)
    assert {each.value for each in copies} == {7}
    assert read.calls == 1


async def test_a_failed_read_fails_its_waiters_together_and_is_not_retried_by_each(
    copy: RefreshedCopy[int], read: HeldRead
) -> None:
    waiting = [asyncio.create_task(copy.get()) for _ in range(20)]
    await wait_until(lambda: read.calls == 1, timeout=10)
    read.values.put_nowait(ServiceUnavailable("the database did not answer in time"))
    outcomes = await asyncio.wait_for(asyncio.gather(*waiting, return_exceptions=True), timeout=10)
    assert all(isinstance(outcome, ServiceUnavailable) for outcome in outcomes)
    assert read.calls == 1


async def test_a_due_copy_is_answered_at_once_while_its_read_is_stuck(
    copy: RefreshedCopy[int], read: HeldRead, clock: FixedClock, registry: CollectorRegistry
) -> None:
    first = asyncio.create_task(copy.get())
    read.values.put_nowait(1)
    assert (await asyncio.wait_for(first, timeout=10)).value == 1
    clock.advance(REFRESH_AFTER)
    # The refresher starts the next read on its own, and it never ends (a stall).
    await wait_until(lambda: read.calls == 2, timeout=10)
    clock.advance(timedelta(minutes=1))
    answers = await asyncio.wait_for(asyncio.gather(*(copy.get() for _ in range(50))), timeout=10)
    assert {answer.value for answer in answers} == {1}
    assert read.calls == 2  # one read at a time: nobody started another

    def aged() -> bool:
        age = registry.get_sample_value("numbers_age_seconds")
        return age is not None and age >= 62

    await wait_until(aged, timeout=10)


async def test_a_failed_refresh_keeps_the_copy_and_the_next_one_replaces_it(
    copy: RefreshedCopy[int], read: HeldRead, clock: FixedClock
) -> None:
    first = asyncio.create_task(copy.get())
    read.values.put_nowait(1)
    await asyncio.wait_for(first, timeout=10)
    clock.advance(REFRESH_AFTER)
    read.values.put_nowait(ServiceUnavailable("database unavailable"))
    await wait_until(lambda: read.calls == 2, timeout=10)
    assert (await copy.get()).value == 1
    read.values.put_nowait(2)

    async def replaced() -> bool:
        return (await copy.get()).value == 2

    await wait_until(replaced, timeout=10)


async def test_read_now_waits_for_a_read_begun_after_it_asked(
    copy: RefreshedCopy[int], read: HeldRead
) -> None:
    first = asyncio.create_task(copy.get())
    await wait_until(lambda: read.calls == 1, timeout=10)
    # A read is in flight already: it began too early for this caller.
    fresh = asyncio.create_task(copy.read_now())
    read.values.put_nowait(1)
    assert (await asyncio.wait_for(first, timeout=10)).value == 1
    await wait_until(lambda: read.calls == 2, timeout=10)
    assert not fresh.done()
    read.values.put_nowait(2)
    assert (await asyncio.wait_for(fresh, timeout=10)).value == 2


async def test_waiting_for_a_first_read_is_bounded(
    read: HeldRead, clock: FixedClock, registry: CollectorRegistry
) -> None:
    refreshed = RefreshedCopy(
        "numbers",
        read,
        clock=clock,
        refresh_after=REFRESH_AFTER,
        wait_limit=timedelta(milliseconds=50),
        age=Gauge("numbers_age_seconds", "age", registry=registry),
    )
    try:
        with pytest.raises(ServiceUnavailable):
            await asyncio.wait_for(refreshed.get(), timeout=10)
        # The read it gave up on goes on, and its copy serves the next caller.
        read.values.put_nowait(3)
        await wait_until(lambda: refreshed.current is not None, timeout=10)
        assert (await refreshed.get()).value == 3
        assert read.calls == 1
    finally:
        await refreshed.close()

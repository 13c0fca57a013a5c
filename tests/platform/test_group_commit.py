"""GroupCommit: requests that arrive while a flush is in flight go together in the next one;
a key the flush cannot serve without waiting is served on its own, holding no one else."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import pytest
from prometheus_client import CollectorRegistry, Histogram

from pin_sessions.platform.group_commit import Flushed, GroupCommit
from tests.support.waiting import wait_until


class Store:
    """A flush that records its batches and can be held open, as a slow round trip is."""

    def __init__(self) -> None:
        self.batches: list[dict[str, int]] = []
        self.release = asyncio.Event()
        self.release.set()
        self.fail = False
        # Keys whose row is "locked": the flush hands them back; alone they wait for unlock.
        self.locked: set[str] = set()
        self.unlocked = asyncio.Event()
        self.alone: list[tuple[str, int]] = []

    async def flush(self, batch: Mapping[str, int]) -> Flushed[str, str]:
        self.batches.append(dict(batch))
        await self.release.wait()
        if self.fail:
            raise ConnectionError("the database went away")
        answers = {
            key: f"{key}@{value}"
            for key, value in batch.items()
            if key != "unknown" and key not in self.locked
        }
        return Flushed(answers, alone=[key for key in batch if key in self.locked])

    async def serve_alone(self, key: str, value: int) -> str | None:
        self.alone.append((key, value))
        await self.unlocked.wait()
        if self.fail:
            raise ConnectionError("the database went away")
        return f"{key}@{value} alone"


def _group(
    store: Store, *, max_batch: int = 1000, linger: float = 0.0
) -> tuple[GroupCommit[str, int, str], Histogram]:
    sizes = Histogram("batch_size", "sizes", buckets=(1, 2, 4, 8), registry=CollectorRegistry())
    group = GroupCommit(
        store.flush,
        alone=store.serve_alone,
        merge=max,
        batch_sizes=sizes,
        max_batch=max_batch,
        linger=linger,
    )
    return group, sizes


async def test_a_lone_request_is_flushed_at_once_and_gets_its_answer() -> None:
    store = Store()
    group, _ = _group(store)
    assert await group.submit("a", 1) == "a@1"
    assert store.batches == [{"a": 1}]


async def test_requests_arriving_during_a_flush_go_together_in_the_next() -> None:
    store = Store()
    store.release.clear()
    group, sizes = _group(store)
    first = asyncio.create_task(group.submit("a", 1))
    await wait_until(lambda: len(store.batches) == 1, timeout=5, interval=0)
    later = [asyncio.create_task(group.submit(key, 2)) for key in ("b", "c", "d")]
    await asyncio.sleep(0)
    store.release.set()

    assert await first == "a@1"
    assert await asyncio.gather(*later) == ["b@2", "c@2", "d@2"]
    assert store.batches == [{"a": 1}, {"b": 2, "c": 2, "d": 2}]
    [metric] = sizes.collect()
    buckets = {
        sample.labels["le"]: sample.value for sample in metric.samples if "le" in sample.labels
    }
    # Two batches: one of 1, one of 3 (cumulative buckets: <=1, <=2, <=4).
    assert (buckets["1.0"], buckets["2.0"], buckets["4.0"]) == (1.0, 1.0, 2.0)


async def test_one_key_twice_in_a_batch_is_one_write_at_the_later_value_and_one_answer() -> None:
    store = Store()
    store.release.clear()
    group, _ = _group(store)
    first = asyncio.create_task(group.submit("x", 1))
    await wait_until(lambda: len(store.batches) == 1, timeout=5, interval=0)
    twice = [asyncio.create_task(group.submit("a", value)) for value in (5, 3)]
    await asyncio.sleep(0)
    store.release.set()
    await first

    assert await asyncio.gather(*twice) == ["a@5", "a@5"]
    assert store.batches[1] == {"a": 5}


async def test_a_key_the_flush_has_no_answer_for_gets_none() -> None:
    group, _ = _group(Store())
    assert await group.submit("unknown", 1) is None


async def test_a_failed_flush_fails_every_request_of_its_batch_and_only_those() -> None:
    store = Store()
    store.release.clear()
    store.fail = True
    group, _ = _group(store)
    doomed = [asyncio.create_task(group.submit(key, 1)) for key in ("a", "b")]
    await wait_until(lambda: len(store.batches) == 1, timeout=5, interval=0)
    store.release.set()
    outcomes = await asyncio.gather(*doomed, return_exceptions=True)

    assert [type(outcome) for outcome in outcomes] == [ConnectionError, ConnectionError]
    store.fail = False
    assert await group.submit("c", 1) == "c@1"


async def test_a_request_whose_caller_left_before_its_batch_is_not_written() -> None:
    store = Store()
    store.release.clear()
    group, _ = _group(store)
    first = asyncio.create_task(group.submit("a", 1))
    await wait_until(lambda: len(store.batches) == 1, timeout=5, interval=0)
    gone = asyncio.create_task(group.submit("b", 1))
    stays = asyncio.create_task(group.submit("c", 1))
    await asyncio.sleep(0)
    gone.cancel()
    store.release.set()
    await first

    assert await stays == "c@1"
    with pytest.raises(asyncio.CancelledError):
        await gone
    assert store.batches == [{"a": 1}, {"c": 1}]


async def test_a_batch_never_exceeds_its_bound() -> None:
    store = Store()
    store.release.clear()
    group, _ = _group(store, max_batch=2)
    first = asyncio.create_task(group.submit("x", 0))
    await wait_until(lambda: len(store.batches) == 1, timeout=5, interval=0)
    rest = [asyncio.create_task(group.submit(key, 1)) for key in "abcde"]
    await asyncio.sleep(0)
    store.release.set()
    await first
    await asyncio.gather(*rest)

    assert [len(batch) for batch in store.batches] == [1, 2, 2, 1]


async def test_a_key_the_flush_hands_back_is_served_alone_while_the_rest_are_answered() -> None:
    store = Store()
    store.locked = {"b"}
    group, _ = _group(store)
    requests = [asyncio.create_task(group.submit(key, 1)) for key in "abc"]
    await wait_until(lambda: requests[0].done() and requests[2].done(), timeout=5, interval=0)

    assert (requests[0].result(), requests[2].result()) == ("a@1", "c@1")
    assert not requests[1].done()
    # The next batch is not held up by the key served alone.
    assert await group.submit("d", 2) == "d@2"
    store.unlocked.set()
    assert await requests[1] == "b@1 alone"
    assert store.alone == [("b", 1)]


async def test_requests_for_a_key_served_alone_wait_for_it_then_go_in_a_batch() -> None:
    """One stuck key is one statement in flight, however often it is asked for."""
    store = Store()
    store.locked = {"b"}
    group, _ = _group(store)
    first = asyncio.create_task(group.submit("b", 1))
    await wait_until(lambda: store.alone == [("b", 1)], timeout=5, interval=0)
    again = [asyncio.create_task(group.submit("b", value)) for value in (2, 3)]
    assert await group.submit("c", 1) == "c@1"
    assert [dict(batch) for batch in store.batches] == [{"b": 1}, {"c": 1}]

    store.locked.clear()
    store.unlocked.set()
    assert await first == "b@1 alone"
    assert await asyncio.gather(*again) == ["b@3", "b@3"]
    assert store.batches[-1] == {"b": 3}


async def test_a_failure_of_a_key_served_alone_fails_only_its_requests() -> None:
    store = Store()
    store.locked = {"b"}
    group, _ = _group(store)
    requests = [asyncio.create_task(group.submit(key, 1)) for key in "ab"]
    await wait_until(lambda: store.alone == [("b", 1)], timeout=5, interval=0)
    store.fail = True
    store.unlocked.set()
    outcomes = await asyncio.gather(*requests, return_exceptions=True)

    assert outcomes[0] == "a@1"
    assert isinstance(outcomes[1], ConnectionError)


async def test_with_a_linger_a_request_that_finds_the_writer_idle_still_goes_at_once() -> None:
    store = Store()
    # An hour: were the linger paid before a lone request's flush, this would time out.
    group, _ = _group(store, linger=3600)
    assert await asyncio.wait_for(group.submit("a", 1), timeout=30) == "a@1"
    assert store.batches == [{"a": 1}]


async def test_with_a_linger_requests_right_behind_a_batch_wait_to_go_together() -> None:
    store = Store()
    group, _ = _group(store, linger=0.2)
    assert await group.submit("a", 1) == "a@1"
    behind = [asyncio.create_task(group.submit("b", 2))]
    # Without a linger "b" would be flushed on its own in these turns of the loop.
    for _ in range(10):
        await asyncio.sleep(0)
    behind += [asyncio.create_task(group.submit(key, 3)) for key in ("c", "d")]

    assert await asyncio.gather(*behind) == ["b@2", "c@3", "d@3"]
    assert store.batches == [{"a": 1}, {"b": 2, "c": 3, "d": 3}]

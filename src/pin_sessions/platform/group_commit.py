"""Group commit: what arrives while one round trip is in flight goes together in the next.

A hot write that is one small statement per request is bounded by the database's cost
per statement (and per commit), not by the work itself. ``GroupCommit`` runs one
statement for many requests: the first request to arrive is flushed at once; every
request that arrives while that flush is in flight waits and goes in the next, and so on.
A batch is whatever arrived during the previous round trip, so a lone request pays no
delay and a busy process batches as much as its load gives it. At a steady rate that is
well below a closed loop's, each round trip catches only a request or two and the
statement's cost is paid per request again; ``linger`` holds the next batch that long
after each flush (as PostgreSQL's ``commit_delay`` or a Kafka producer's ``linger.ms``
do), so requests that come right behind a batch go together, while one that finds the
writer idle is still flushed at once.

Each request names a key and a value; requests for one key in one batch are merged into
one (``merge``) and all get the same answer. The flush returns an answer per key; a key it
has no answer for gets None. A failed flush fails every request of its batch.

A batch never waits for one of its members (SPEC §11): a flush that cannot serve a key
without waiting (its row is locked by another transaction) hands it back in
``Flushed.alone``, and that key is served by ``alone`` in a task of its own while the
batch's other keys are answered and the next batch goes on. While a key is served alone,
newer requests for it wait out of the batches, so one stuck key holds one connection.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from prometheus_client import Histogram

K = TypeVar("K")
V = TypeVar("V")
R = TypeVar("R")

# Keeps one statement's parameter arrays (and its row locks) bounded under any load.
MAX_BATCH = 1000


@dataclass(frozen=True)
class Flushed(Generic[K, R]):
    """A flush's outcome: the answers it has, and the keys each to be served on its own."""

    answers: Mapping[K, R]
    alone: Collection[K] = ()


@dataclass
class _Waiting(Generic[V, R]):
    value: V
    futures: list[asyncio.Future[R | None]] = field(default_factory=list)

    @property
    def abandoned(self) -> bool:
        """Everyone who asked has gone (a client that hung up): nothing to write for them."""
        return all(future.done() for future in self.futures)


class GroupCommit(Generic[K, V, R]):
    """Batches concurrent ``submit`` calls into single ``flush`` calls, one in flight at a time."""

    def __init__(
        self,
        flush: Callable[[Mapping[K, V]], Awaitable[Flushed[K, R]]],
        *,
        alone: Callable[[K, V], Awaitable[R | None]],
        merge: Callable[[V, V], V],
        batch_sizes: Histogram,
        max_batch: int = MAX_BATCH,
        linger: float = 0.0,
    ) -> None:
        self._flush = flush
        self._alone = alone
        self._merge = merge
        self._batch_sizes = batch_sizes
        self._max_batch = max_batch
        self._linger = linger
        self._waiting: dict[K, _Waiting[V, R]] = {}
        self._flusher: asyncio.Task[None] | None = None
        # Keys being served on their own, each by its task (kept, so it is not collected).
        self._served_alone: dict[K, asyncio.Task[None]] = {}

    @property
    def waiting(self) -> int:
        """Keys waiting for a batch (or for their key's statement alone to end)."""
        return len(self._waiting)

    async def submit(self, key: K, value: V) -> R | None:
        """The flush's answer for ``key``, once the batch that carries it has run."""
        future: asyncio.Future[R | None] = asyncio.get_running_loop().create_future()
        waiting = self._waiting.get(key)
        if waiting is None:
            self._waiting[key] = _Waiting(value, [future])
        else:
            waiting.value = self._merge(waiting.value, value)
            waiting.futures.append(future)
        self._wake()
        return await future

    def _wake(self) -> None:
        if self._flusher is None:
            self._flusher = asyncio.create_task(self._flush_while_waiting())

    async def _flush_while_waiting(self) -> None:
        try:
            while batch := self._next_batch():
                await self._run(batch)
                if self._linger:
                    await asyncio.sleep(self._linger)
        finally:
            self._flusher = None

    def _next_batch(self) -> dict[K, _Waiting[V, R]]:
        """Up to ``max_batch`` waiting keys, but none that is being served alone."""
        batch: dict[K, _Waiting[V, R]] = {}
        ready = [key for key in self._waiting if key not in self._served_alone]
        for key in ready:
            if len(batch) == self._max_batch:
                break
            waiting = self._waiting.pop(key)
            if not waiting.abandoned:
                batch[key] = waiting
        return batch

    async def _run(self, batch: dict[K, _Waiting[V, R]]) -> None:
        self._batch_sizes.observe(len(batch))
        try:
            flushed = await self._flush({key: waiting.value for key, waiting in batch.items()})
        except Exception as exc:
            for waiting in batch.values():
                _fail(waiting, exc)
            return
        except BaseException:
            # The process is stopping: nobody in this batch will get an answer.
            for waiting in batch.values():
                _cancel(waiting)
            raise
        for key in flushed.alone:
            self._served_alone[key] = asyncio.create_task(self._run_alone(key, batch.pop(key)))
        for key, waiting in batch.items():
            _answer(waiting, flushed.answers.get(key))

    async def _run_alone(self, key: K, waiting: _Waiting[V, R]) -> None:
        try:
            answer = await self._alone(key, waiting.value)
        except Exception as exc:
            _fail(waiting, exc)
        except BaseException:
            _cancel(waiting)
            raise
        else:
            _answer(waiting, answer)
        finally:
            del self._served_alone[key]
            # Requests for this key that came meanwhile were held back: their turn now.
            if key in self._waiting:
                self._wake()


def _answer(waiting: _Waiting[V, R], answer: R | None) -> None:
    for future in waiting.futures:
        if not future.done():
            future.set_result(answer)


def _fail(waiting: _Waiting[V, R], exc: Exception) -> None:
    for future in waiting.futures:
        if not future.done():
            future.set_exception(exc)


def _cancel(waiting: _Waiting[V, R]) -> None:
    for future in waiting.futures:
        future.cancel()

"""One batch mechanism: run a bounded statement until it comes back short.

Work too large for one statement — a retention phase, the closer's backlog, a user's
erasure, the outbox's pruning — is done as batches, each a statement bounded by a row
count (``LIMIT``) that is its own transaction, so no transaction holds many row locks or
runs long. :func:`until_short` repeats a batch until one claims fewer rows than the
bound (nothing is left, or what is left is another worker's), the budget is spent or
``stop`` is set. Stop and budget are read between batches only: a started statement
always finishes and commits. The budget is read after a batch, never before the first,
so every caller makes some progress however late it starts.

:func:`rows_affected` is the one reader of command tags (``DELETE 42``).
:class:`KeysetCursor` walks an index from where its previous batch ended.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pin_sessions.platform.database import Connection, Database
    from pin_sessions.platform.queries import Query

# A keyset cursor's start: before any instant.
EARLIEST = datetime.min.replace(tzinfo=UTC)

Batch = Callable[[], Awaitable[int]]


@dataclass
class Progress:
    """What the batches did so far: rows claimed, batches run, the longest and largest."""

    rows: int = 0
    batches: int = 0
    longest_batch_ms: float = 0.0
    largest_batch: int = 0

    def record(self, rows: int, started: float) -> None:
        """One batch that claimed ``rows`` and began at ``started`` (``time.monotonic``)."""
        self.rows += rows
        self.batches += 1
        self.largest_batch = max(self.largest_batch, rows)
        self.longest_batch_ms = max(self.longest_batch_ms, (time.monotonic() - started) * 1000)


async def until_short(
    batch: Batch,
    *,
    size: int,
    stop: asyncio.Event | None = None,
    deadline: float | None = None,
    progress: Progress | None = None,
) -> Progress:
    """Run ``batch`` until it claims fewer than ``size`` rows, ``deadline`` passes or ``stop``.

    ``batch`` commits its own work and returns how many rows it claimed. ``deadline`` is
    a ``time.monotonic()`` instant, read after each batch. ``progress`` accumulates across
    calls (a job's phase that runs several loops); a new one is made when none is given.
    """
    progress = progress if progress is not None else Progress()
    while stop is None or not stop.is_set():
        started = time.monotonic()
        rows = await batch()
        progress.record(rows, started)
        if rows < size or (deadline is not None and time.monotonic() >= deadline):
            break
    return progress


def in_transaction(database: Database, work: Callable[[Connection], Awaitable[int]]) -> Batch:
    """A batch that runs ``work`` in a transaction of its own and returns its count."""

    async def batch() -> int:
        async with database.transaction() as conn:
            return await work(conn)

    return batch


def rows_affected(status: str) -> int:
    """Rows touched by a statement, from its command tag (``UPDATE 42``, ``INSERT 0 7``)."""
    return int(status.rsplit(" ", 1)[-1])


@dataclass
class KeysetCursor:
    """Batches of one statement that walks an index from where its previous batch ended.

    The query takes ``:bound``, the bound its rows must not pass, ``:batch_size`` and
    ``:reached``, the cursor, and returns one row: how many rows it changed, and the
    highest key among them (null when none). Starting at the cursor spares each batch a
    rescan of the index entries its predecessors left behind.
    """

    query: Query
    bound: datetime
    reached: datetime = EARLIEST
    # The last batch's whole row, for a statement that returns more than these two.
    row: Any = None

    async def next(self, conn: Connection, batch_size: int) -> int:
        """One batch (its own transaction); how many rows it changed."""
        row = await self.query.fetchrow(
            conn, bound=self.bound, batch_size=batch_size, reached=self.reached
        )
        assert row is not None  # an aggregate always returns its row
        self.row = row
        self.reached = row[1] or self.reached
        changed: int = row[0]
        return changed

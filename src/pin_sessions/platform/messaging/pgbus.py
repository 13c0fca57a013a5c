"""The built-in PostgreSQL bus: a consumer reads the outbox log itself (SPEC §6).

Rows are read in ``(txid, position)`` order and only below the snapshot's xmin. Every
transaction older than xmin has ended, so no row can ever appear before what was read:
a row whose transaction commits after a later-numbered one is held back until it is
visible, never skipped. Within a batch, messages go to the handler in position order,
which is the order an aggregate's events were written (its row lock serialises them).
One case escapes that: two writes of one aggregate whose xids run opposite to their
commit order, and that fall into two different batches of a backlog, arrive in xid order
(both still arrive).

The position is the last ``(txid, position)`` of a batch, stored only after every message
of the batch was applied or parked; a crash before that replays the batch, and the
runner's first-seen rows turn the replay into no-ops. Instances of one consumer take turns
under an advisory lock, so they never apply a batch twice at once.
"""

from __future__ import annotations

import asyncio
import operator
from collections.abc import Sequence
from datetime import datetime

import structlog

from pin_sessions.platform.batching import rows_affected, until_short
from pin_sessions.platform.clock import Clock
from pin_sessions.platform.database import Connection, Database
from pin_sessions.platform.messaging.envelope import from_outbox_row
from pin_sessions.platform.messaging.loop import PRUNE_BUDGET_SECONDS, prune_deadline, run_passes
from pin_sessions.platform.messaging.metrics import MessagingMetrics
from pin_sessions.platform.messaging.runner import ConsumerRunner

log = structlog.get_logger(__name__)

# Namespace of this bus's advisory locks (the second key is the consumer's hash).
LOCK_CLASS = 0x5042  # "PB"
START = ("0", 0)

TRY_LOCK = "select pg_try_advisory_lock($1, hashtext($2))"
UNLOCK = "select pg_advisory_unlock($1, hashtext($2))"

SELECT_POSITION = """
select last_txid::text as txid, last_position as position
from messaging.bus_positions where consumer = $1
"""

SELECT_BATCH = """
select position, txid::text as txid, message_id, topic, event_type, version, aggregate_type,
       aggregate_id, payload, headers, created_at
from messaging.outbox
where (txid, position) > ($1::text::xid8, $2)
  and txid < pg_snapshot_xmin(pg_current_snapshot())
order by txid, position
limit $3
"""

UPSERT_POSITION = """
insert into messaging.bus_positions (consumer, last_txid, last_position, updated_at)
values ($1, $2::text::xid8, $3, $4)
on conflict (consumer) do update
set last_txid = excluded.last_txid, last_position = excluded.last_position,
    updated_at = excluded.updated_at
"""

SELECT_BACKLOG = """
select count(*) as pending, min(created_at) as oldest
from messaging.outbox where (txid, position) > ($1::text::xid8, $2)
"""

SELECT_POSITIONS_OF = """
select last_txid::text as txid, last_position as position
from messaging.bus_positions where consumer = any($1::text[])
"""

# Rows every bus consumer has passed are of no use to anyone; delete them a chunk at a time
# (each its own statement), until a chunk comes back short or the pass's budget is spent.
DELETE_PASSED = """
delete from messaging.outbox where position in (
    select position from messaging.outbox
    where (txid, position) <= ($1::text::xid8, $2)
    order by txid, position
    limit $3
)
"""


class PostgresBusConsumer:
    """Role: feeds one handler from the outbox log, keeping its own durable position."""

    def __init__(
        self,
        runner: ConsumerRunner,
        database: Database,
        clock: Clock,
        metrics: MessagingMetrics,
        *,
        all_consumers: Sequence[str] = (),
        batch_size: int = 200,
        prune_batch_size: int = 1000,
        prune_budget_seconds: float = PRUNE_BUDGET_SECONDS,
        idle_seconds: float = 0.1,
    ) -> None:
        self.name = f"consume.{runner.consumer}"
        self._runner = runner
        self._database = database
        self._clock = clock
        self._metrics = metrics
        self._all_consumers = list(all_consumers)
        self._batch_size = batch_size
        self._prune_batch_size = prune_batch_size
        self._prune_budget_seconds = prune_budget_seconds
        self._idle_seconds = idle_seconds

    async def run(self, stop: asyncio.Event) -> None:
        log.info("consumer started", consumer=self._runner.consumer, bus="postgres")
        await run_passes(
            self.name,
            self.run_once,
            stop,
            self._clock,
            idle_seconds=self._idle_seconds,
            max_backoff_seconds=5.0,
        )
        log.info("consumer stopped", consumer=self._runner.consumer)

    async def run_once(self, now: datetime) -> bool:
        """One batch; True when a full batch was read (more is likely waiting)."""
        consumer = self._runner.consumer
        async with self._database.connection() as conn:
            if not await conn.fetchval(TRY_LOCK, LOCK_CLASS, consumer):
                return False  # another instance of this consumer holds the turn
            try:
                return await self._batch(conn, consumer, now)
            finally:
                await conn.execute(UNLOCK, LOCK_CLASS, consumer)

    async def _batch(self, conn: Connection, consumer: str, now: datetime) -> bool:
        stored = await conn.fetchrow(SELECT_POSITION, consumer)
        cursor = (stored["txid"], stored["position"]) if stored else START
        rows = await conn.fetch(SELECT_BATCH, cursor[0], cursor[1], self._batch_size)
        if rows:
            await self._runner.process_all(
                [
                    from_outbox_row(row)
                    for row in sorted(rows, key=operator.itemgetter("position"))
                    if row["topic"] == self._runner.handler.topic
                ]
            )
            cursor = (rows[-1]["txid"], rows[-1]["position"])
            await conn.execute(UPSERT_POSITION, consumer, cursor[0], cursor[1], now)
            await self._prune(conn)
        await self._observe(conn, consumer, cursor, now)
        return len(rows) == self._batch_size

    async def _prune(self, conn: Connection) -> None:
        if not self._all_consumers:
            return
        positions = await conn.fetch(SELECT_POSITIONS_OF, self._all_consumers)
        if len(positions) < len(self._all_consumers):
            return  # a consumer that never ran has read nothing yet
        txid, position = min((int(row["txid"]), row["position"]) for row in positions)

        async def chunk() -> int:
            status = await conn.execute(DELETE_PASSED, str(txid), position, self._prune_batch_size)
            return rows_affected(status)

        await until_short(
            chunk, size=self._prune_batch_size, deadline=prune_deadline(self._prune_budget_seconds)
        )

    async def _observe(
        self, conn: Connection, consumer: str, cursor: tuple[str, int], now: datetime
    ) -> None:
        backlog = await conn.fetchrow(SELECT_BACKLOG, cursor[0], cursor[1])
        assert backlog is not None
        self._metrics.outbox_pending.labels(consumer).set(backlog["pending"])
        oldest = backlog["oldest"]
        lag = (now - oldest).total_seconds() if oldest is not None else 0.0
        self._metrics.outbox_lag.labels(consumer).set(max(lag, 0.0))

"""The streaming replica that serves the API's reads which tolerate lag (SPEC §11).

``PIN_DATABASE__READ_URL`` names a hot standby of the primary. :class:`ReadReplica` keeps a
pool on it and, in the background, its state: every :data:`CHECK_INTERVAL` it notes the
primary's WAL position and asks the replica how far it has replayed. Requests never wait on
that check; they read the state it left (:meth:`ReadReplica.usable`).

The lag is measured by comparing WAL positions, on this process's monotonic clock: the
replica is as far behind as the oldest primary position it has not replayed is old. So

* an idle primary writes no WAL and the replica has replayed all of it: lag 0, where
  ``now() - pg_last_xact_replay_timestamp()`` would grow for as long as nobody writes;
* a replica whose WAL receiver lost the primary, or whose replay is paused or slow, falls
  behind the positions the primary writes meanwhile, and its lag grows with them;
* neither server's clock is read, so clocks that disagree change nothing.

The lag is known to within one check interval (the lower bound is what is reported). States:

* ``unknown`` — not judged yet: no check has answered, or the replica has not replayed even
  the oldest position noted, which is still younger than the bound (a process just started);
* ``ok`` — the only state that serves reads;
* ``lagging`` — further behind than ``max_lag``;
* ``down`` — the check could not connect, failed or took longer than :data:`CHECK_TIMEOUT`,
  or a read on the replica could not connect;
* ``not_replica`` — the server is not in recovery (a promoted standby, a primary): its WAL
  positions cannot be compared with the primary's, so what it holds is unknown.

``PIN_DATABASE__READ_URL`` may name several hosts (libpq's multi-host syntax): the check
connects to the first standby among them, the pool to standbys only, whatever the URL's
``target_session_attrs``; a standby promoted meanwhile is dropped by the next check.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum

import asyncpg
import structlog
from asyncpg.connect_utils import SessionAttribute
from prometheus_client import CollectorRegistry, Gauge

from pin_sessions.platform.database import Database

log = structlog.get_logger(__name__)

# Two small statements a second per API process: cheap, and a stopped replica is skipped
# within about a second of the first read that failed over (or of this check).
CHECK_INTERVAL = timedelta(seconds=1)
# Longer than a healthy answer on a loaded host, short enough that a frozen replica stops
# being read from well before a request's own bound would answer 503.
CHECK_TIMEOUT = timedelta(seconds=2)

# Positions as bytes from 0/0: asyncpg has no codec for pg_lsn, and a bigint compares.
SELECT_PRIMARY_POSITION = "select (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint"
SELECT_REPLAYED = (
    "select pg_is_in_recovery() as in_recovery,"
    " (pg_last_wal_replay_lsn() - '0/0'::pg_lsn)::bigint as replayed"
)


class ReplicaState(StrEnum):
    UNKNOWN = "unknown"
    OK = "ok"
    LAGGING = "lagging"
    DOWN = "down"
    NOT_REPLICA = "not_replica"


@dataclass(frozen=True)
class Position:
    """The primary's WAL position (bytes) as noted at ``at`` (monotonic seconds)."""

    at: float
    lsn: int


def lag_behind(positions: Sequence[Position], replayed: int, now: float) -> float | None:
    """How long ago the primary wrote WAL that the replica has not replayed (seconds).

    ``positions`` are oldest first. 0 when the replica has replayed them all; None when it
    lacks even the oldest, so its lag is at least that position's age and maybe more, or
    when there is no position to compare with.
    """
    if not positions:
        return None
    for index, position in enumerate(positions):
        if position.lsn > replayed:
            return None if index == 0 else max(now - position.at, 0.0)
    return 0.0


def judge(
    positions: Sequence[Position], replayed: int, now: float, max_lag: float
) -> tuple[ReplicaState, float | None]:
    """The state of a replica that has replayed ``replayed``, and its lag when known."""
    lag = lag_behind(positions, replayed, now)
    if lag is None:
        # Behind the oldest position: by its age at least. Within the bound, that says
        # nothing yet (a process just started has noted positions for a moment only).
        at_least = now - positions[0].at if positions else 0.0
        if at_least <= max_lag:
            return ReplicaState.UNKNOWN, None
        lag = at_least
    return (ReplicaState.OK if lag <= max_lag else ReplicaState.LAGGING), lag


class Positions:
    """The primary's recent WAL positions, oldest first, kept as long as one can decide a lag."""

    def __init__(self, keep: timedelta) -> None:
        self._keep = keep.total_seconds()
        self._positions: deque[Position] = deque()

    def add(self, position: Position) -> None:
        # An unchanged position keeps the moment it was first seen: WAL that existed then
        # and is still missing is that old. An idle primary leaves one position, not many.
        if not self._positions or self._positions[-1].lsn < position.lsn:
            self._positions.append(position)
        # The oldest stays while the next is younger than `keep`: a replica that lacks it
        # is then known to be at least `keep` behind.
        while len(self._positions) > 1 and position.at - self._positions[1].at >= self._keep:
            self._positions.popleft()

    def oldest_first(self) -> Sequence[Position]:
        return tuple(self._positions)


@dataclass(frozen=True)
class _Replayed:
    in_recovery: bool
    lsn: int | None


class ReadReplica:
    """The replica's pool and its state, kept by one check at a time in the background."""

    def __init__(
        self,
        database: Database,
        dsn: str,
        primary: Database,
        registry: CollectorRegistry,
        *,
        max_lag: timedelta,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.database = database
        self._dsn = dsn
        self._primary = primary
        self._max_lag = max_lag.total_seconds()
        self._monotonic = monotonic
        self._positions = Positions(max_lag + CHECK_INTERVAL)
        self._state = ReplicaState.UNKNOWN
        self._lag: float | None = None
        self._checking: asyncpg.Connection[asyncpg.Record] | None = None
        self._checker: asyncio.Task[None] | None = None
        self._lag_gauge = Gauge(
            "pin_database_read_replica_lag_seconds",
            "How far the read replica is behind the primary (+Inf while it cannot be measured)",
            registry=registry,
            # Under serve --workers N: the worst any live worker sees.
            multiprocess_mode="livemax",
        )
        self._lag_gauge.set(math.inf)

    @property
    def state(self) -> ReplicaState:
        return self._state

    @property
    def lag_seconds(self) -> float | None:
        """The last lag measured, None while the state has none (unknown, down, not_replica)."""
        return self._lag

    def usable(self) -> bool:
        """Whether reads go there now: the last check found it within the bound."""
        return self._state is ReplicaState.OK and self.database.is_open

    def mark_down(self, error: BaseException) -> None:
        """A read could not reach the replica: skip it until a check finds it again."""
        self._settle(ReplicaState.DOWN, None, error)

    def start(self) -> None:
        """Check in the background from now on; idempotent."""
        if self._checker is None:
            self._checker = asyncio.create_task(self._check_forever(), name="check read replica")

    async def close(self) -> None:
        if self._checker is not None:
            self._checker.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._checker
            self._checker = None
        self._drop_check_connection()
        await self.database.close()

    async def check(self) -> ReplicaState:
        """One check: note the primary's position, ask the replica's, judge the lag."""
        noted_at = self._monotonic()
        position, replayed = await asyncio.gather(self._primary_position(), self._replayed())
        if position is not None:
            self._positions.add(Position(noted_at, position))
        if isinstance(replayed, BaseException):
            self._settle(ReplicaState.DOWN, None, replayed)
        elif not replayed.in_recovery or replayed.lsn is None:
            await self._not_a_replica()
        else:
            positions = self._positions.oldest_first()
            self._settle(*judge(positions, replayed.lsn, self._monotonic(), self._max_lag))
        if self._state is ReplicaState.OK and not self.database.is_open:
            try:
                await self.database.open()
            except Exception as exc:  # unreachable since the check: skipped, checked again
                self._settle(ReplicaState.DOWN, None, exc)
        return self._state

    async def _not_a_replica(self) -> None:
        """The server the check reached is out of recovery (promoted, or a primary all along).

        No read goes there; the next check, and the pool's next connections, look among the
        URL's hosts again for one that is a standby (the pool takes nothing else), and the
        pool's connections made while it was one are replaced.
        """
        self._settle(ReplicaState.NOT_REPLICA, None)
        self._drop_check_connection()
        await self.database.expire_connections()

    async def _check_forever(self) -> None:
        while True:
            await self.check()
            await asyncio.sleep(CHECK_INTERVAL.total_seconds())

    async def _primary_position(self) -> int | None:
        """The primary's WAL position now; None when it cannot tell (the last ones still count)."""
        try:
            async with self._primary.connection() as conn:
                return int(await conn.fetchval(SELECT_PRIMARY_POSITION))
        except Exception:  # the primary's trouble is every request's, and shows there
            return None

    async def _replayed(self) -> _Replayed | BaseException:
        """How far the replica has replayed, on a connection of the check's own."""
        timeout = CHECK_TIMEOUT.total_seconds()
        try:
            if self._checking is None:
                self._checking = await asyncpg.connect(
                    self._dsn,
                    timeout=timeout,
                    server_settings={"application_name": "pin-sessions"},
                    # Of several hosts, a standby if one is; else the first that answers,
                    # to be named not_replica.
                    target_session_attrs=SessionAttribute.prefer_standby,
                )
            row = await self._checking.fetchrow(SELECT_REPLAYED, timeout=timeout)
        except Exception as exc:  # refused, reset, timed out: a fresh connection next time
            self._drop_check_connection()
            return exc
        assert row is not None
        return _Replayed(bool(row["in_recovery"]), row["replayed"])

    def _drop_check_connection(self) -> None:
        if self._checking is not None:
            # Never a polite close: the server may be the one not answering.
            self._checking.terminate()
            self._checking = None

    def _settle(
        self, state: ReplicaState, lag: float | None, error: BaseException | None = None
    ) -> None:
        self._lag = lag
        self._lag_gauge.set(math.inf if lag is None else lag)
        previous, self._state = self._state, state
        if state is previous:
            return
        details: dict[str, object] = {"state": str(state), "previous": str(previous)}
        if lag is not None:
            details["lagSeconds"] = round(lag, 3)
        if error is not None:
            details["errorType"] = type(error).__name__
        if state is ReplicaState.OK:
            log.info("read replica in use", **details)
        elif previous is ReplicaState.OK or state is not ReplicaState.UNKNOWN:
            log.warning("read replica skipped; its reads go to the primary", **details)

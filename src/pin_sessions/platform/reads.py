"""Where the API's reads that tolerate lag run: the read replica when it can, else the primary.

SPEC §11: session history and the dev-stats summary may be a few seconds old, so they go to
``PIN_DATABASE__READ_URL`` while its replica is usable (:mod:`pin_sessions.platform.replica`);
everything else — writes, and reads that must see the caller's own writes — uses the primary
pool directly and never comes here.

A read meant for the replica runs on the primary instead, counted in
``pin_database_read_fallbacks_total{reason}``, when

* the replica is skipped: ``reason`` is its state (``unknown``, ``lagging``, ``down``,
  ``not_replica``);
* the replica could not be reached for it (refused, reset, shutting down: ``down``, and the
  replica is skipped from then on until a check finds it again), or PostgreSQL refused it
  there (``failed``: a query cancelled by a conflict with recovery, for instance).

A read that *timed out* on the replica is not run again: the request already waited as long
as one call may (SPEC §11), and gets its 503 like any other call that did. A replica that
answers nothing at all is skipped by the next check (or at once, when the client gave up).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import asyncpg
from prometheus_client import CollectorRegistry, Counter

from pin_sessions.platform.database import Connection, Database
from pin_sessions.platform.errors import ServiceUnavailable
from pin_sessions.platform.replica import ReadReplica, ReplicaState

T = TypeVar("T")

Read = Callable[[Connection], Awaitable[T]]

FAILED = "failed"
SKIPPED = tuple(state.value for state in ReplicaState if state is not ReplicaState.OK)
FALLBACK_REASONS = (*SKIPPED, FAILED)


class Reads:
    """Runs a read on the replica while it is usable, otherwise (or should it fail) the primary."""

    def __init__(
        self, primary: Database, registry: CollectorRegistry, replica: ReadReplica | None = None
    ) -> None:
        self._primary = primary
        self.replica = replica
        self._fallbacks = Counter(
            "pin_database_read_fallbacks_total",
            "Reads meant for the read replica that ran on the primary, by why",
            ["reason"],
            registry=registry,
        )
        if replica is not None:
            # Every reason from zero, so the first fallback is an increase a rate can see.
            for reason in FALLBACK_REASONS:
                self._fallbacks.labels(reason)

    async def run(self, read: Read[T]) -> T:
        """``read(conn)`` on an autocommit connection of the replica or of the primary."""
        replica = self.replica
        if replica is None:
            return await _on(self._primary, read)
        if not replica.usable():
            reason = str(replica.state)
        else:
            try:
                return await _on(replica.database, read)
            except ServiceUnavailable as exc:
                # Also the replica going away (shut down, crashed, promoted) or the
                # connection breaking: the database boundary turns those into 503s.
                if _timed_out(exc):
                    if isinstance(exc.__cause__, TimeoutError):
                        replica.mark_down(exc.__cause__)
                    raise
                replica.mark_down(exc.__cause__ or exc)
                reason = ReplicaState.DOWN.value
            except asyncpg.PostgresError:
                reason = FAILED
        self._fallbacks.labels(reason).inc()
        return await _on(self._primary, read)

    def replica_status(self) -> dict[str, Any] | None:
        """What ``/readyz`` says of the replica; None without one."""
        if self.replica is None:
            return None
        lag = self.replica.lag_seconds
        return {
            "state": str(self.replica.state),
            "lagSeconds": None if lag is None else round(lag, 3),
        }


async def _on(database: Database, read: Read[T]) -> T:
    async with database.connection() as conn:
        return await read(conn)


def _timed_out(exc: ServiceUnavailable) -> bool:
    """No connection in time, no answer in time, or the statement ran past its timeout."""
    return isinstance(exc.__cause__, (TimeoutError, asyncpg.QueryCanceledError))

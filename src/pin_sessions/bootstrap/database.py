"""Where the process's database is, and the pools every role opens on it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta

import asyncpg
from asyncpg.connect_utils import SessionAttribute
from prometheus_client import CollectorRegistry

from pin_sessions.platform.clock import Clock, SystemClock
from pin_sessions.platform.database import (
    CLIENT_TIMEOUT_GRACE,
    TARGET_SESSION_ATTRS,
    Bounds,
    Database,
)
from pin_sessions.platform.embedded import EmbeddedPostgres
from pin_sessions.platform.metrics import new_registry
from pin_sessions.platform.migrations import migrate
from pin_sessions.platform.reads import Reads
from pin_sessions.platform.replica import ReadReplica
from pin_sessions.platform.runtime import Runtime
from pin_sessions.platform.secrets import resolve_server_secrets
from pin_sessions.settings import Settings


@dataclass(frozen=True)
class DatabaseEndpoint:
    """Where the process's database is; ``embedded`` is None when PIN_DATABASE_URL names it."""

    dsn: str
    embedded: EmbeddedPostgres | None = None


@contextlib.contextmanager
def open_database_endpoint(
    settings: Settings, *, migrate_embedded: bool = True
) -> Iterator[DatabaseEndpoint]:
    """``PIN_DATABASE_URL`` when set; otherwise the embedded server, stopped on exit."""
    if settings.database_url is not None:
        yield DatabaseEndpoint(settings.database_url.get_secret_value())
        return
    embedded = EmbeddedPostgres(settings.data_dir / "pg")
    dsn = embedded.start()
    try:
        # Nobody else manages the embedded database, so every role brings its schema up
        # to date (under the migration lock) instead of failing on a fresh data directory.
        if migrate_embedded:
            asyncio.run(_migrate_once(dsn))
        yield DatabaseEndpoint(dsn, embedded)
    finally:
        embedded.stop()


@contextlib.contextmanager
def database_endpoint(settings: Settings, *, migrate_embedded: bool = True) -> Iterator[str]:
    """The DSN of :func:`open_database_endpoint`, for the roles that only connect."""
    with open_database_endpoint(settings, migrate_embedded=migrate_embedded) as endpoint:
        yield endpoint.dsn


async def _migrate_once(dsn: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await migrate(conn)
    finally:
        await conn.close()


def build_runtime(
    settings: Settings,
    dsn: str,
    *,
    clock: Clock | None = None,
    registry: CollectorRegistry | None = None,
    database: Database | None = None,
) -> Runtime:
    """What every role shares; ``database`` defaults to the API's bounded pool."""
    return Runtime(
        settings=settings,
        database=database or api_database(settings, dsn),
        clock=clock or SystemClock(),
        registry=registry if registry is not None else new_registry(),
        secrets=resolve_server_secrets(settings),
    )


def api_database(
    settings: Settings, dsn: str, *, target_session_attrs: SessionAttribute = TARGET_SESSION_ATTRS
) -> Database:
    """The API's pool: every call bounded by ``PIN_DATABASE__*`` (SPEC §9).

    No route changes its session (no SET, LISTEN or session advisory lock), so its
    connections go back to the pool without the reset round trip. The pool opens full,
    before the process listens: grown on demand, its first connections were made under
    the first burst of traffic (a start, a restart, a replaced worker), each one's
    authentication and setup queued behind the requests waiting for it, and the soak's
    first seconds at 100 heartbeats/s answered 503s for the acquire timeout.
    """
    options = settings.database
    return Database(
        dsn,
        min_size=options.pool_max,
        max_size=options.pool_max,
        bounds=Bounds(
            statement_timeout=options.statement_timeout, acquire_timeout=options.acquire_timeout
        ),
        reset_sessions=False,
        connect_timeout=options.connect_timeout,
        target_session_attrs=target_session_attrs,
    )


def replica_database(settings: Settings, dsn: str) -> Database:
    """The read replica's pool: the API pool's bounds, and only ever a standby of the URL's
    hosts (a replica promoted meanwhile is a primary, no replica any more)."""
    return api_database(settings, dsn, target_session_attrs=SessionAttribute.standby)


def build_reads(runtime: Runtime) -> Reads:
    """The API's reads that tolerate lag: on ``PIN_DATABASE__READ_URL`` when set (SPEC §11).

    The replica's pool has the API pool's bounds; it is opened by the replica's first good
    check, so an API whose replica is away still starts.
    """
    settings = runtime.settings
    read_url = settings.database.read_url
    if read_url is None:
        return Reads(runtime.database, runtime.registry)
    dsn = read_url.get_secret_value()
    replica = ReadReplica(
        replica_database(settings, dsn),
        dsn,
        runtime.database,
        runtime.registry,
        max_lag=settings.database.read_max_lag,
    )
    return Reads(runtime.database, runtime.registry, replica)


def worker_database(settings: Settings, dsn: str, *, max_size: int | None = None) -> Database:
    """A pool for jobs, delivery and one-shot commands: they keep their own budgets (SPEC §9).

    ``PIN_DATABASE__WORKER_POOL_MAX`` connections unless the command knows better (a
    one-shot command needs one; ``up``'s worker roles share one larger pool).
    """
    options = settings.database
    return Database(
        dsn,
        max_size=options.worker_pool_max if max_size is None else max_size,
        connect_timeout=options.connect_timeout,
    )


def call_bound(runtime: Runtime) -> timedelta:
    """How long a request may wait for a read of shared state: one API call (SPEC §11)."""
    return runtime.settings.database.statement_timeout + CLIENT_TIMEOUT_GRACE

"""asyncpg pool and the explicit transaction boundary.

Operations open the transaction (``async with db.transaction() as conn``) and pass
``conn`` to repositories, which run their statements on it and never commit.
Driver errors are translated at this boundary into :mod:`pin_sessions.platform.errors`.

A pool may be *bounded* (SPEC §9, what the API uses): getting a connection waits at
most ``acquire_timeout``; every statement runs under PostgreSQL's ``statement_timeout``
and, should the server not answer at all (a frozen host, a stopped postmaster), under a
client-side timeout a little longer. Past either bound the caller gets
:class:`~pin_sessions.platform.errors.ServiceUnavailable` at once, and a connection whose
statement the client gave up on is closed rather than returned to the pool, since its
state is unknown and waiting for its cancellation could take as long as the stall.

So one call of the API answers within the statement timeout + :data:`CLIENT_TIMEOUT_GRACE`
(SPEC §11); a request waiting on work done for many (a group commit) waits no longer
than that either (:meth:`Database.call_bound`).

A connection that fails under its caller (the server died, shut down, refused it, or the
driver lost track of the protocol) is closed on the spot, never returned to the pool, and
the caller gets :class:`ServiceUnavailable` with ``Retry-After`` (SPEC §12): its next
connection is a new one, to the server that takes writes now (:data:`TARGET_SESSION_ATTRS`).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager, suppress
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from typing import TYPE_CHECKING, TypeAlias

import asyncpg
from asyncpg.connect_utils import SessionAttribute

from pin_sessions.platform.errors import ServiceUnavailable, UniqueViolation, ValidationFailed

if TYPE_CHECKING:
    from asyncpg.pool import PoolConnectionProxy

    # A plain connection or one lent by the pool: repositories accept either.
    Connection: TypeAlias = asyncpg.Connection[asyncpg.Record] | PoolConnectionProxy[asyncpg.Record]
else:
    Connection = asyncpg.Connection


# How much longer than PostgreSQL's own statement_timeout the client waits for an answer:
# a live server cancels the statement itself (and keeps the connection usable); only a
# server that answers nothing at all reaches the client-side bound.
CLIENT_TIMEOUT_GRACE = timedelta(seconds=1)

# Whatever the URL says: of the hosts a multi-host URL names, only the one that takes
# writes — neither a standby in recovery nor a server set read-only (an old primary
# brought back fenced) — is ever connected to; none such is a connect failure (503).
# asyncpg prefers this argument to the URL's own ``target_session_attrs``.
TARGET_SESSION_ATTRS = SessionAttribute.read_write

# How soon a client refused for the database's unavailability may ask again: a failover
# of a synchronous pair takes seconds, a lost connection is replaced on the next call.
RETRY_AFTER_SECONDS = 1

# NaN and the infinities are not JSON: PostgreSQL would refuse them (and echo the value in
# its log), so they must never be encoded in the first place.
_encode_json = partial(json.dumps, allow_nan=False)


@dataclass(frozen=True)
class Bounds:
    """How long one database call may take (SPEC §9)."""

    statement_timeout: timedelta
    acquire_timeout: timedelta

    @property
    def call(self) -> timedelta:
        """The longest one call waits for a server that answers nothing (SPEC §11)."""
        return self.statement_timeout + CLIENT_TIMEOUT_GRACE


async def _init_connection(conn: Connection) -> None:
    # jsonb travels as Python objects; every timestamp is read back in UTC.
    for type_name in ("jsonb", "json"):
        await conn.set_type_codec(
            type_name, encoder=_encode_json, decoder=json.loads, schema="pg_catalog"
        )


async def _keep_session(conn: Connection) -> None:
    """Return a connection to the pool as it is (asyncpg still rolls back an open transaction).

    For a pool whose users never change their session: no SET, LISTEN, session advisory
    lock or cursor outside a transaction. It spares every request the reset round trip
    (``RESET ALL; UNLISTEN *; ...``), which was a second statement per heartbeat.
    """


async def create_pool(
    dsn: str,
    *,
    min_size: int = 1,
    max_size: int = 10,
    bounds: Bounds | None = None,
    reset_sessions: bool = True,
    connect_timeout: timedelta | None = None,
    target_session_attrs: SessionAttribute = TARGET_SESSION_ATTRS,
) -> asyncpg.Pool[asyncpg.Record]:
    """Open a pool whose sessions run in UTC and decode json/jsonb to Python objects.

    ``target_session_attrs`` chooses among the URL's hosts, overriding the URL.
    """
    server_settings = {"timezone": "UTC", "application_name": "pin-sessions"}
    command_timeout = None
    if bounds is not None:
        server_settings["statement_timeout"] = _milliseconds(bounds.statement_timeout)
        command_timeout = (bounds.statement_timeout + CLIENT_TIMEOUT_GRACE).total_seconds()
    # asyncpg's own connect timeout when unset: 60 s.
    timeout = 60.0 if connect_timeout is None else connect_timeout.total_seconds()
    return await asyncpg.create_pool(
        dsn,
        timeout=timeout,
        min_size=min_size,
        max_size=max_size,
        init=_init_connection,
        command_timeout=command_timeout,
        server_settings=server_settings,
        reset=None if reset_sessions else _keep_session,
        target_session_attrs=target_session_attrs,
    )


def _milliseconds(duration: timedelta) -> str:
    return str(max(int(duration.total_seconds() * 1000), 1))


class Database:
    """The pool plus the one way to open a transaction.

    Built closed, so wiring stays synchronous; the process opens it once it has an
    event loop (the API's lifespan, a worker's ``main``).
    """

    def __init__(
        self,
        dsn: str,
        *,
        min_size: int = 1,
        max_size: int = 10,
        bounds: Bounds | None = None,
        reset_sessions: bool = True,
        connect_timeout: timedelta | None = None,
        target_session_attrs: SessionAttribute = TARGET_SESSION_ATTRS,
    ) -> None:
        self._dsn = dsn
        self._target_session_attrs = target_session_attrs
        self._connect_timeout = connect_timeout
        self._sizes = (min_size, max_size)
        self._bounds = bounds
        self._reset_sessions = reset_sessions
        self._acquire_timeout = None if bounds is None else bounds.acquire_timeout.total_seconds()
        self._pool: asyncpg.Pool[asyncpg.Record] | None = None

    async def open(self) -> None:
        if self._pool is None:
            self._pool = await create_pool(
                self._dsn,
                min_size=self._sizes[0],
                max_size=self._sizes[1],
                bounds=self._bounds,
                reset_sessions=self._reset_sessions,
                connect_timeout=self._connect_timeout,
                target_session_attrs=self._target_session_attrs,
            )

    @property
    def is_open(self) -> bool:
        return self._pool is not None

    @property
    def pool(self) -> asyncpg.Pool[asyncpg.Record]:
        if self._pool is None:
            raise RuntimeError("Database.open() has not been awaited")
        return self._pool

    @asynccontextmanager
    async def call_bound(self) -> AsyncIterator[None]:
        """Wait in the block no longer than one call of this pool may take.

        For a request whose statement is shared with others (a group commit): a batch
        already stuck in a stall must not make it wait for that batch and then its own.
        Past the bound: :class:`ServiceUnavailable`, as for a call of its own.
        """
        if self._bounds is None:
            yield
            return
        try:
            async with asyncio.timeout(self._bounds.call.total_seconds()):
                yield
        except TimeoutError as exc:
            raise _unavailable("the database did not answer in time") from exc

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Connection]:
        """One connection, one transaction: committed on normal exit, rolled back on error."""
        with translate_driver_errors():
            async with self.pool.acquire(timeout=self._acquire_timeout) as conn:
                with _closed_when_abandoned(conn):
                    async with _transaction(conn):
                        yield conn

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[Connection]:
        """A connection in autocommit mode, for single statements that are their own transaction."""
        with translate_driver_errors():
            async with self.pool.acquire(timeout=self._acquire_timeout) as conn:
                with _closed_when_abandoned(conn):
                    yield conn

    async def expire_connections(self) -> None:
        """Replace every pooled connection at its next use: the server it reached changed role."""
        if self._pool is not None:
            await self._pool.expire_connections()

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None


@asynccontextmanager
async def _transaction(conn: Connection) -> AsyncIterator[None]:
    """``conn.transaction()``, except where the connection failed or the server stopped answering.

    A statement past the client-side bound is not rolled back: the rollback would first wait
    for the statement's cancellation, as long again as the bound, for a server that may
    never acknowledge it. Nor is one whose connection failed: the server is gone, or the
    driver is still reading the failure (a ROLLBACK then fails in the driver's own state
    machine). The connection is closed instead (the server rolls back the transaction of a
    session that ends), so the caller's 503 comes within one bound. A rollback that fails
    for any reason closes the connection too: the failure that made the rollback is the one
    that leaves, not the rollback's.
    """
    transaction = conn.transaction()
    await transaction.start()
    try:
        yield
    except BaseException as exc:
        if _connection_lost(exc):
            _terminate(conn)
            raise
        try:
            await transaction.rollback()
        except Exception:  # the session's state is unknown: it never goes back to the pool
            _terminate(conn)
        raise
    await transaction.commit()


# What leaves a connection unusable, or in a state nobody knows: the server went away or
# shut the session down (class 08, class 57: admin or crash shutdown, cannot connect now),
# the socket failed, the driver lost track of the protocol or the connection is closed or
# still busy (InternalClientError, InterfaceError), no host of the URL takes writes
# (TargetServerAttributeNotMatched), or the server no longer takes writes.
_CONNECTION_FAILURES = (
    TimeoutError,
    OSError,
    asyncpg.PostgresConnectionError,
    asyncpg.OperatorInterventionError,
    asyncpg.InterfaceError,
    asyncpg.InternalClientError,
    asyncpg.ReadOnlySQLTransactionError,
)


def _connection_lost(exc: BaseException) -> bool:
    """Whether ``exc`` leaves the connection it came from unfit for the next caller."""
    if isinstance(exc, (asyncpg.QueryCanceledError, asyncpg.exceptions.DataError)):
        # statement_timeout (the server cancelled the statement; the session is fine), or
        # a value our code passed wrongly (a bug, to be seen as one).
        return False
    return isinstance(exc, _CONNECTION_FAILURES)


@contextmanager
def _closed_when_abandoned(conn: Connection) -> Iterator[None]:
    """Close a connection that failed, or whose statement the client stopped waiting for.

    Its server may still be running the statement, be unreachable or gone: returning it to
    the pool would hand the next caller a broken connection, or make the release wait for
    a cancellation that may never be acknowledged.
    """
    try:
        yield
    except BaseException as exc:
        if _connection_lost(exc):
            _terminate(conn)
        raise


def _terminate(conn: Connection) -> None:
    """Close the connection now; done already if asyncpg closed it and gave it back.

    asyncpg closes a connection whose cancellation went unacknowledged within its command
    timeout and returns it to the pool; the pool's proxy then refuses every call with an
    ``InterfaceError`` ("released back to the pool"). There is nothing left to close.
    """
    with suppress(asyncpg.InterfaceError):
        conn.terminate()


def server_address(conn: Connection) -> str:
    """``host:port`` (or the Unix socket) of the server ``conn`` reached, as the URL names it.

    Of a multi-host URL, the host the driver chose. asyncpg keeps it only as the
    connection's ``_addr`` (a host and port, or a socket path), which
    tests/platform/test_failover.py pins.
    """
    address = getattr(conn, "_addr", None)
    if isinstance(address, tuple):
        return f"{address[0]}:{address[1]}"
    return str(address)


@contextmanager
def translate_driver_errors() -> Iterator[None]:
    """Map asyncpg failures to our error types, keeping the constraint name."""
    try:
        yield
    except TimeoutError as exc:
        # No connection within acquire_timeout, or no answer within the client-side bound.
        raise _unavailable("the database did not answer in time") from exc
    except asyncpg.QueryCanceledError as exc:
        # statement_timeout: the server gave up on a statement that ran too long.
        raise _unavailable("the database did not answer in time") from exc
    except asyncpg.UniqueViolationError as exc:
        raise UniqueViolation(exc.constraint_name) from exc
    except (asyncpg.UntranslatableCharacterError, asyncpg.CharacterNotInRepertoireError) as exc:
        # Input the API let through but PostgreSQL cannot store (U+0000 in text or jsonb):
        # the caller's data is at fault, not the service.
        raise ValidationFailed("a text value holds a character that cannot be stored") from exc
    except _CONNECTION_FAILURES as exc:
        if not _connection_lost(exc):
            raise
        raise _unavailable("database unavailable") from exc


def _unavailable(detail: str) -> ServiceUnavailable:
    return ServiceUnavailable(detail, retry_after=RETRY_AFTER_SECONDS)

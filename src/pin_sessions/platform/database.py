"""asyncpg pool and the explicit transaction boundary.

Operations open the transaction (``async with db.transaction() as conn``) and pass
``conn`` to repositories, which run their statements on it and never commit.
Driver errors are translated at this boundary into :mod:`pin_sessions.platform.errors`.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import TYPE_CHECKING, TypeAlias

import asyncpg

from pin_sessions.platform.errors import ServiceUnavailable, UniqueViolation, ValidationFailed

if TYPE_CHECKING:
    from asyncpg.pool import PoolConnectionProxy

    # A plain connection or one lent by the pool: repositories accept either.
    Connection: TypeAlias = asyncpg.Connection[asyncpg.Record] | PoolConnectionProxy[asyncpg.Record]
else:
    Connection = asyncpg.Connection


async def _init_connection(conn: Connection) -> None:
    # jsonb travels as Python objects; every timestamp is read back in UTC.
    await conn.set_type_codec("jsonb", encoder=json.dumps, decoder=json.loads, schema="pg_catalog")
    await conn.set_type_codec("json", encoder=json.dumps, decoder=json.loads, schema="pg_catalog")


async def create_pool(
    dsn: str, *, min_size: int = 1, max_size: int = 10
) -> asyncpg.Pool[asyncpg.Record]:
    """Open a pool whose sessions run in UTC and decode json/jsonb to Python objects."""
    return await asyncpg.create_pool(
        dsn,
        min_size=min_size,
        max_size=max_size,
        init=_init_connection,
        server_settings={"timezone": "UTC", "application_name": "pin-sessions"},
    )


class Database:
    """The pool plus the one way to open a transaction.

    Built closed, so wiring stays synchronous; the process opens it once it has an
    event loop (the API's lifespan, a worker's ``main``).
    """

    def __init__(self, dsn: str, *, min_size: int = 1, max_size: int = 10) -> None:
        self._dsn = dsn
        self._sizes = (min_size, max_size)
        self._pool: asyncpg.Pool[asyncpg.Record] | None = None

    async def open(self) -> None:
        if self._pool is None:
            self._pool = await create_pool(
                self._dsn, min_size=self._sizes[0], max_size=self._sizes[1]
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
    async def transaction(self) -> AsyncIterator[Connection]:
        """One connection, one transaction: committed on normal exit, rolled back on error."""
        with translate_driver_errors():
            async with self.pool.acquire() as conn, conn.transaction():
                yield conn

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[Connection]:
        """A connection in autocommit mode, for single statements that are their own transaction."""
        with translate_driver_errors():
            async with self.pool.acquire() as conn:
                yield conn

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None


@contextmanager
def translate_driver_errors() -> Iterator[None]:
    """Map asyncpg failures to our error types, keeping the constraint name."""
    try:
        yield
    except asyncpg.UniqueViolationError as exc:
        raise UniqueViolation(exc.constraint_name) from exc
    except (asyncpg.UntranslatableCharacterError, asyncpg.CharacterNotInRepertoireError) as exc:
        # Input the API let through but PostgreSQL cannot store (U+0000 in text or jsonb):
        # the caller's data is at fault, not the service.
        raise ValidationFailed("a text value holds a character that cannot be stored") from exc
    except (OSError, asyncpg.CannotConnectNowError, asyncpg.ConnectionDoesNotExistError) as exc:
        raise ServiceUnavailable("database unavailable") from exc

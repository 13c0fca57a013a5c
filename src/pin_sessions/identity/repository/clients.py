"""Service clients (SPEC §8) and the failures of their authentication (SPEC §11)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime

import asyncpg

from pin_sessions.identity.repository.loaded import QUERIES
from pin_sessions.platform.batching import rows_affected
from pin_sessions.platform.database import Connection


async def insert_client(
    conn: Connection,
    client_id: uuid.UUID,
    name: str,
    secret_hash: bytes,
    scopes: Sequence[str],
    now: datetime,
) -> None:
    await QUERIES.insert_client.execute(
        conn,
        client_id=client_id,
        name=name,
        secret_hash=secret_hash,
        scopes=list(scopes),
        now=now,
    )


async def clients(conn: Connection) -> list[asyncpg.Record]:
    """Every client, oldest first, without its secret's hash."""
    return await QUERIES.select_clients.fetch(conn)


async def client(conn: Connection, client_id: uuid.UUID) -> asyncpg.Record | None:
    return await QUERIES.select_client.fetchrow(conn, client_id=client_id)


async def client_named(conn: Connection, name: str) -> asyncpg.Record | None:
    return await QUERIES.select_client_named.fetchrow(conn, name=name)


async def client_credentials(
    conn: Connection,
    client_id: uuid.UUID | None,
    client_key: str | None,
    address_key: str | None,
) -> asyncpg.Record:
    """The client's row with its secret's hash (columns null when there is no such client),
    and the recent failures counted under ``client_key`` and ``address_key``."""
    row = await QUERIES.select_client_credentials.fetchrow(
        conn, client_id=client_id, client_key=client_key, address_key=address_key
    )
    assert row is not None  # one row, the client's columns null when there is none
    return row


async def rotate_client_credentials(
    conn: Connection, client_id: uuid.UUID, secret_hash: bytes, now: datetime
) -> bool:
    """The Active client's new secret hash; False when it is unknown or not Active."""
    rotated = await QUERIES.rotate_client_credentials.fetchval(
        conn, client_id=client_id, secret_hash=secret_hash, now=now
    )
    return rotated is not None


async def disable_client(conn: Connection, client_id: uuid.UUID, now: datetime) -> bool:
    """Active → Disabled; False when it is unknown or was disabled already."""
    return await QUERIES.disable_client.fetchval(conn, client_id=client_id, now=now) is not None


async def client_status(conn: Connection, client_id: uuid.UUID) -> str | None:
    """The client's status; None when there is no such client."""
    status: str | None = await QUERIES.select_client_status.fetchval(conn, client_id=client_id)
    return status


async def disabled_client_ids(conn: Connection) -> list[uuid.UUID]:
    rows = await QUERIES.select_disabled_client_ids.fetch(conn)
    return [row[0] for row in rows]


async def record_authentication_failure(
    conn: Connection,
    keys: Sequence[str],
    now: datetime,
    window_start: datetime,
    failure_limit: int,
) -> list[asyncpg.Record]:
    """One failure counted under each of ``keys``: each key's ``failed_at`` (the newest, in
    the window) and ``last_refused``, whether the limit was reached before this one."""
    return await QUERIES.record_client_authentication_failure.fetch(
        conn,
        keys=list(keys),
        failed_at=now,
        window_start=window_start,
        failure_limit=failure_limit,
    )


async def delete_expired_authentication_failures(
    conn: Connection, window_start: datetime, batch_size: int
) -> int:
    """At most ``batch_size`` rows whose last failure is before ``window_start``: how many."""
    status = await QUERIES.delete_expired_client_authentication_failures.execute(
        conn, window_start=window_start, batch_size=batch_size
    )
    return rows_affected(status)

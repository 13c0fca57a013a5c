"""A user's data (SPEC §10): the erasure's statements, its proof, and the export's pages."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import datetime

import asyncpg

from pin_sessions.identity.repository.loaded import QUERIES
from pin_sessions.identity.repository.sessions import RevokedSession
from pin_sessions.platform.database import Connection, Database
from pin_sessions.platform.queries import Query
from pin_sessions.platform.streamed_json import keyset_rows

# keyset_rows gives a page query its key to read after and the page size, last.
_PAGE_PARAMETERS = ("after_created_at", "after_id", "page_rows")


def _paged(query: Query) -> str:
    """``query``'s text for keyset_rows, once its parameters are checked to end as it fills."""
    if query.params[-3:] != _PAGE_PARAMETERS:
        raise ValueError(f"{query.name} must end with the parameters {_PAGE_PARAMETERS}")
    return query.text


_SIGN_IN_REQUESTS_PAGE = _paged(QUERIES.export_sign_in_requests_page)
_REFRESH_SESSIONS_PAGE = _paged(QUERIES.export_refresh_sessions_page)


async def user(conn: Connection, user_id: uuid.UUID) -> asyncpg.Record | None:
    """The user row (``id``, ``phone_number``, ``created_at``); None: no such user (now)."""
    return await QUERIES.select_user.fetchrow(conn, id=user_id)


async def erasure(conn: Connection, user_id: uuid.UUID) -> asyncpg.Record | None:
    """The proof of the user's erasure; None when the user was never erased."""
    return await QUERIES.select_erasure.fetchrow(conn, user_id=user_id)


async def delete_phone_sign_in_requests(conn: Connection, phone_number: str) -> None:
    await QUERIES.delete_phone_sign_in_requests.execute(conn, phone_number=phone_number)


async def revoke_all_user_sessions(
    conn: Connection, user_id: uuid.UUID, now: datetime, reason: str
) -> list[RevokedSession]:
    """Every live session of the user → Revoked(``reason``): the ones that were live."""
    rows = await QUERIES.revoke_all_user_sessions.fetch(
        conn, user_id=user_id, now=now, reason=reason
    )
    return [RevokedSession(row["id"], row["user_id"]) for row in rows]


async def delete_user_sessions(conn: Connection, user_id: uuid.UUID) -> None:
    await QUERIES.delete_user_sessions.execute(conn, user_id=user_id)


async def delete_user_permissions(conn: Connection, user_id: uuid.UUID) -> None:
    await QUERIES.delete_user_permissions.execute(conn, user_id=user_id)


async def delete_user(conn: Connection, user_id: uuid.UUID) -> bool:
    """The user row goes; False when it was gone already (another erasure came first)."""
    return await QUERIES.delete_user.fetchval(conn, id=user_id) is not None


async def insert_erasure(
    conn: Connection,
    user_id: uuid.UUID,
    requested_at: datetime,
    requested_by: str,
    message_id: uuid.UUID,
) -> None:
    await QUERIES.insert_erasure.execute(
        conn,
        user_id=user_id,
        requested_at=requested_at,
        requested_by=requested_by,
        message_id=message_id,
    )


async def permission_grants(conn: Connection, user_id: uuid.UUID) -> list[asyncpg.Record]:
    """The user's permissions with when each was granted (``permission``, ``granted_at``)."""
    return await QUERIES.select_user_permission_grants.fetch(conn, user_id=user_id)


def sign_in_requests_of(database: Database, phone_number: str) -> AsyncIterator[asyncpg.Record]:
    """The phone's sign-in requests, oldest first, a page at a time (each its connection)."""
    return keyset_rows(database, _SIGN_IN_REQUESTS_PAGE, phone_number)


def refresh_sessions_of(database: Database, user_id: uuid.UUID) -> AsyncIterator[asyncpg.Record]:
    """The user's sessions, oldest first, a page at a time (each its connection)."""
    return keyset_rows(database, _REFRESH_SESSIONS_PAGE, user_id)

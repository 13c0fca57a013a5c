"""Identity's statements run on the caller's connection; nothing here commits."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

import asyncpg

from pin_sessions.identity import sql
from pin_sessions.identity.domain import (
    ConfirmationState,
    ConfirmationStatus,
    LimitEdges,
    SessionState,
    SessionStatus,
    SignInLimits,
)
from pin_sessions.platform.database import Connection


@dataclass(frozen=True)
class NewSession:
    id: uuid.UUID
    user_id: uuid.UUID
    family_id: uuid.UUID
    token_hash: bytes
    created_at: datetime
    expires_at: datetime
    device_user_agent: str
    device_ip: str | None
    # When the sign-in that started the family happened: the access tokens' auth_time.
    signed_in_at: datetime


@dataclass(frozen=True)
class RotatedParent:
    user_id: uuid.UUID
    family_id: uuid.UUID
    device_user_agent: str
    signed_in_at: datetime


@dataclass(frozen=True)
class RevokedSession:
    id: uuid.UUID
    user_id: uuid.UUID


@dataclass(frozen=True)
class DeviceSession:
    id: uuid.UUID
    status: SessionStatus
    created_at: datetime
    last_used_at: datetime
    expires_at: datetime
    device_user_agent: str


async def lock_sign_in_requests(conn: Connection) -> None:
    """Serialise the service's sign-in requests until the transaction ends."""
    await conn.execute(sql.LOCK_SIGN_IN_REQUESTS, sql.SIGN_IN_REQUEST_LOCK_CLASS)


async def limit_edges(
    conn: Connection,
    phone_number: str,
    ip_network: str | None,
    limits: SignInLimits,
    now: datetime,
) -> LimitEdges:
    """Where each limit of a new request of this phone, from this network, stands at ``now``."""
    row = await conn.fetchrow(
        sql.SIGN_IN_REQUEST_LIMIT_EDGES,
        phone_number,
        now - limits.per_phone.window,
        limits.per_phone.count - 1,
        ip_network,
        now - limits.per_address.window,
        limits.per_address.count - 1,
        now - limits.service.window,
        limits.service.count - 1,
    )
    assert row is not None  # a select without FROM has exactly one row
    return LimitEdges(phone=row["phone"], address=row["address"], service=row["service"])


@dataclass(frozen=True)
class NewRequest:
    id: uuid.UUID
    phone_number: str
    code_hash: bytes
    created_at: datetime
    expires_at: datetime
    ip_address: str | None
    ip_network: str | None


async def insert_request(conn: Connection, request: NewRequest) -> None:
    await conn.execute(
        sql.INSERT_SIGN_IN_REQUEST,
        request.id,
        request.phone_number,
        request.code_hash,
        request.created_at,
        request.expires_at,
        request.ip_address,
        request.ip_network,
    )


async def delete_unsent_request(conn: Connection, request_id: uuid.UUID) -> None:
    await conn.execute(sql.DELETE_UNSENT_SIGN_IN_REQUEST, request_id)


async def confirm_request(
    conn: Connection, request_id: uuid.UUID, code_hash: bytes, now: datetime, max_attempts: int
) -> str | None:
    """Pending → Confirmed; the request's phone number, or None when nothing changed."""
    phone: str | None = await conn.fetchval(
        sql.CONFIRM_SIGN_IN_REQUEST, request_id, code_hash, now, max_attempts
    )
    return phone


async def count_wrong_code(
    conn: Connection, request_id: uuid.UUID, code_hash: bytes, now: datetime, max_attempts: int
) -> bool:
    """Use one attempt for a wrong code; False when the request could not take one."""
    attempts: int | None = await conn.fetchval(
        sql.COUNT_WRONG_CODE, request_id, code_hash, now, max_attempts
    )
    return attempts is not None


async def request_state(conn: Connection, request_id: uuid.UUID) -> ConfirmationState | None:
    row = await conn.fetchrow(sql.SELECT_SIGN_IN_REQUEST_STATE, request_id)
    if row is None:
        return None
    return ConfirmationState(ConfirmationStatus(row["status"]), row["expires_at"], row["attempts"])


async def request_exists(conn: Connection, request_id: uuid.UUID) -> bool:
    exists: bool = await conn.fetchval(sql.SIGN_IN_REQUEST_EXISTS, request_id)
    return exists


async def user_for_phone(
    conn: Connection, phone_number: str, new_user_id: uuid.UUID, now: datetime
) -> uuid.UUID:
    """The phone's user, created with ``new_user_id`` on its first sign-in."""
    created: uuid.UUID | None = await conn.fetchval(
        sql.INSERT_USER_IF_NEW, new_user_id, phone_number, now
    )
    if created is not None:
        return created
    # A new statement sees the row a concurrent first sign-in committed meanwhile.
    existing: uuid.UUID = await conn.fetchval(sql.SELECT_USER_ID_BY_PHONE, phone_number)
    return existing


async def find_user_by_phone(conn: Connection, phone_number: str) -> uuid.UUID | None:
    user_id: uuid.UUID | None = await conn.fetchval(sql.SELECT_USER_ID_BY_PHONE, phone_number)
    return user_id


async def permissions(conn: Connection, user_id: uuid.UUID) -> list[str]:
    return [row["permission"] for row in await conn.fetch(sql.SELECT_USER_PERMISSIONS, user_id)]


async def grant_permission(
    conn: Connection, user_id: uuid.UUID, permission: str, now: datetime
) -> None:
    await conn.execute(sql.INSERT_USER_PERMISSION, user_id, permission, now)


async def withdraw_permission(conn: Connection, user_id: uuid.UUID, permission: str) -> None:
    await conn.execute(sql.DELETE_USER_PERMISSION, user_id, permission)


async def insert_session(conn: Connection, session: NewSession) -> None:
    await conn.execute(
        sql.INSERT_REFRESH_SESSION,
        session.id,
        session.user_id,
        session.family_id,
        session.token_hash,
        session.created_at,
        session.expires_at,
        session.device_user_agent,
        session.device_ip,
        session.signed_in_at,
    )


async def rotate_session(
    conn: Connection, token_hash: bytes, successor_id: uuid.UUID, now: datetime
) -> RotatedParent | None:
    """Active and unexpired → Rotated; None when the token's session was not that."""
    row = await conn.fetchrow(sql.ROTATE_REFRESH_SESSION, token_hash, now, successor_id)
    if row is None:
        return None
    return RotatedParent(
        row["user_id"], row["family_id"], row["device_user_agent"], row["signed_in_at"]
    )


async def session_by_token_hash(conn: Connection, token_hash: bytes) -> SessionState | None:
    return _session_state(await conn.fetchrow(sql.SELECT_REFRESH_SESSION_BY_HASH, token_hash))


async def session_by_id(conn: Connection, session_id: uuid.UUID) -> SessionState | None:
    return _session_state(await conn.fetchrow(sql.SELECT_REFRESH_SESSION_BY_ID, session_id))


def _session_state(row: asyncpg.Record | None) -> SessionState | None:
    if row is None:
        return None
    return SessionState(
        id=row["id"],
        user_id=row["user_id"],
        family_id=row["family_id"],
        status=SessionStatus(row["status"]),
        expires_at=row["expires_at"],
        rotated_at=row["rotated_at"],
        replaced_by=row["replaced_by"],
        signed_in_at=row["signed_in_at"],
    )


async def revoke_family(
    conn: Connection, family_id: uuid.UUID, now: datetime
) -> list[RevokedSession]:
    rows = await conn.fetch(sql.REVOKE_FAMILY, family_id, now)
    return [RevokedSession(row["id"], row["user_id"]) for row in rows]


async def revoke_user_session(
    conn: Connection, session_id: uuid.UUID, user_id: uuid.UUID, now: datetime, reason: str
) -> RevokedSession | None:
    row = await conn.fetchrow(sql.REVOKE_USER_SESSION, session_id, user_id, now, reason)
    return None if row is None else RevokedSession(row["id"], row["user_id"])


async def revoke_other_user_sessions(
    conn: Connection, user_id: uuid.UUID, keep_session_id: uuid.UUID, now: datetime
) -> list[RevokedSession]:
    rows = await conn.fetch(sql.REVOKE_OTHER_USER_SESSIONS, user_id, keep_session_id, now)
    return [RevokedSession(row["id"], row["user_id"]) for row in rows]


async def live_sessions(conn: Connection, user_id: uuid.UUID, now: datetime) -> list[DeviceSession]:
    rows = await conn.fetch(sql.SELECT_LIVE_USER_SESSIONS, user_id, now)
    return [
        DeviceSession(
            id=row["id"],
            status=SessionStatus(row["status"]),
            created_at=row["created_at"],
            last_used_at=row["last_used_at"],
            expires_at=row["expires_at"],
            device_user_agent=row["device_user_agent"],
        )
        for row in rows
    ]

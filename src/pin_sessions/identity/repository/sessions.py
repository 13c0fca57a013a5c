"""Refresh sessions: opened by a sign-in, rotated by a refresh, revoked, listed, and the
Bearer check's liveness."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

import asyncpg

from pin_sessions.identity.domain import SessionState, SessionStatus
from pin_sessions.identity.repository.loaded import QUERIES
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


async def insert_session(conn: Connection, session: NewSession) -> None:
    await QUERIES.insert_refresh_session.execute(
        conn,
        id=session.id,
        user_id=session.user_id,
        family_id=session.family_id,
        token_hash=session.token_hash,
        created_at=session.created_at,
        expires_at=session.expires_at,
        device_user_agent=session.device_user_agent,
        device_ip=session.device_ip,
        signed_in_at=session.signed_in_at,
    )


async def rotate_session(
    conn: Connection, token_hash: bytes, successor_id: uuid.UUID, now: datetime
) -> RotatedParent | None:
    """Active and unexpired → Rotated; None when the token's session was not that."""
    row = await QUERIES.rotate_refresh_session.fetchrow(
        conn, token_hash=token_hash, now=now, successor_id=successor_id
    )
    if row is None:
        return None
    return RotatedParent(
        row["user_id"], row["family_id"], row["device_user_agent"], row["signed_in_at"]
    )


async def session_by_token_hash(conn: Connection, token_hash: bytes) -> SessionState | None:
    row = await QUERIES.select_refresh_session_by_hash.fetchrow(conn, token_hash=token_hash)
    return _session_state(row)


async def session_by_id(conn: Connection, session_id: uuid.UUID) -> SessionState | None:
    return _session_state(await QUERIES.select_refresh_session_by_id.fetchrow(conn, id=session_id))


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
    rows = await QUERIES.revoke_family.fetch(conn, family_id=family_id, now=now)
    return [RevokedSession(row["id"], row["user_id"]) for row in rows]


async def revoke_user_session(
    conn: Connection, session_id: uuid.UUID, user_id: uuid.UUID, now: datetime, reason: str
) -> RevokedSession | None:
    row = await QUERIES.revoke_user_session.fetchrow(
        conn, id=session_id, user_id=user_id, now=now, reason=reason
    )
    return None if row is None else RevokedSession(row["id"], row["user_id"])


async def revoke_other_user_sessions(
    conn: Connection, user_id: uuid.UUID, keep_session_id: uuid.UUID, now: datetime
) -> list[RevokedSession]:
    rows = await QUERIES.revoke_other_user_sessions.fetch(
        conn, user_id=user_id, keep_id=keep_session_id, now=now
    )
    return [RevokedSession(row["id"], row["user_id"]) for row in rows]


async def live_sessions(conn: Connection, user_id: uuid.UUID, now: datetime) -> list[DeviceSession]:
    rows = await QUERIES.select_live_user_sessions.fetch(conn, user_id=user_id, now=now)
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


async def session_is_live(
    conn: Connection, session_id: uuid.UUID, user_id: uuid.UUID, now: datetime
) -> bool:
    """The user's session is Active and unexpired at ``now`` (the Bearer check's question)."""
    live: bool = await QUERIES.select_session_is_live.fetchval(
        conn, id=session_id, user_id=user_id, now=now
    )
    return live

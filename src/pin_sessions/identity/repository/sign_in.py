"""Sign-in requests, and the users and permissions a confirmed one leads to."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from pin_sessions.identity.domain import (
    ConfirmationState,
    ConfirmationStatus,
    LimitEdges,
    SignInLimits,
)
from pin_sessions.identity.repository.loaded import QUERIES
from pin_sessions.platform.database import Connection

# Two-key advisory locks live in their own keyspace; this first key names the use.
SIGN_IN_REQUEST_LOCK_CLASS = 0x51C2  # "SICR"


@dataclass(frozen=True)
class NewRequest:
    id: uuid.UUID
    phone_number: str
    code_hash: bytes
    created_at: datetime
    expires_at: datetime
    ip_address: str | None
    ip_network: str | None


async def lock_sign_in_requests(conn: Connection) -> None:
    """Serialise the service's sign-in requests until the transaction ends."""
    await QUERIES.lock_sign_in_requests.execute(conn, lock_class=SIGN_IN_REQUEST_LOCK_CLASS)


async def limit_edges(
    conn: Connection,
    phone_number: str,
    ip_network: str | None,
    limits: SignInLimits,
    now: datetime,
) -> LimitEdges:
    """Where each limit of a new request of this phone, from this network, stands at ``now``."""
    row = await QUERIES.sign_in_request_limit_edges.fetchrow(
        conn,
        phone_number=phone_number,
        phone_since=now - limits.per_phone.window,
        phone_offset=limits.per_phone.count - 1,
        ip_network=ip_network,
        address_since=now - limits.per_address.window,
        address_offset=limits.per_address.count - 1,
        service_since=now - limits.service.window,
        service_offset=limits.service.count - 1,
    )
    assert row is not None  # a select without FROM has exactly one row
    return LimitEdges(phone=row["phone"], address=row["address"], service=row["service"])


async def insert_request(conn: Connection, request: NewRequest) -> None:
    await QUERIES.insert_sign_in_request.execute(
        conn,
        id=request.id,
        phone_number=request.phone_number,
        code_hash=request.code_hash,
        created_at=request.created_at,
        expires_at=request.expires_at,
        ip_address=request.ip_address,
        ip_network=request.ip_network,
    )


async def delete_unsent_request(conn: Connection, request_id: uuid.UUID) -> None:
    await QUERIES.delete_unsent_sign_in_request.execute(conn, id=request_id)


async def confirm_request(
    conn: Connection, request_id: uuid.UUID, code_hash: bytes, now: datetime, max_attempts: int
) -> str | None:
    """Pending → Confirmed; the request's phone number, or None when nothing changed."""
    phone: str | None = await QUERIES.confirm_sign_in_request.fetchval(
        conn, id=request_id, code_hash=code_hash, now=now, max_attempts=max_attempts
    )
    return phone


async def count_wrong_code(
    conn: Connection, request_id: uuid.UUID, code_hash: bytes, now: datetime, max_attempts: int
) -> bool:
    """Use one attempt for a wrong code; False when the request could not take one."""
    attempts: int | None = await QUERIES.count_wrong_code.fetchval(
        conn, id=request_id, code_hash=code_hash, now=now, max_attempts=max_attempts
    )
    return attempts is not None


async def request_state(conn: Connection, request_id: uuid.UUID) -> ConfirmationState | None:
    row = await QUERIES.select_sign_in_request_state.fetchrow(conn, id=request_id)
    if row is None:
        return None
    return ConfirmationState(ConfirmationStatus(row["status"]), row["expires_at"], row["attempts"])


async def request_exists(conn: Connection, request_id: uuid.UUID) -> bool:
    exists: bool = await QUERIES.sign_in_request_exists.fetchval(conn, id=request_id)
    return exists


async def user_for_phone(
    conn: Connection, phone_number: str, new_user_id: uuid.UUID, now: datetime
) -> uuid.UUID:
    """The phone's user, created with ``new_user_id`` on its first sign-in."""
    created: uuid.UUID | None = await QUERIES.insert_user_if_new.fetchval(
        conn, id=new_user_id, phone_number=phone_number, created_at=now
    )
    if created is not None:
        return created
    # A new statement sees the row a concurrent first sign-in committed meanwhile.
    existing: uuid.UUID = await QUERIES.select_user_id_by_phone.fetchval(
        conn, phone_number=phone_number
    )
    return existing


async def find_user_by_phone(conn: Connection, phone_number: str) -> uuid.UUID | None:
    user_id: uuid.UUID | None = await QUERIES.select_user_id_by_phone.fetchval(
        conn, phone_number=phone_number
    )
    return user_id


async def permissions(conn: Connection, user_id: uuid.UUID) -> list[str]:
    rows = await QUERIES.select_user_permissions.fetch(conn, user_id=user_id)
    return [row["permission"] for row in rows]


async def grant_permission(
    conn: Connection, user_id: uuid.UUID, permission: str, now: datetime
) -> None:
    await QUERIES.insert_user_permission.execute(
        conn, user_id=user_id, permission=permission, granted_at=now
    )


async def withdraw_permission(conn: Connection, user_id: uuid.UUID, permission: str) -> None:
    await QUERIES.delete_user_permission.execute(conn, user_id=user_id, permission=permission)

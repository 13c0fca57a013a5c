"""A user's data in identity: export and erasure (SPEC §10).

Erasure is one transaction: the user's live sessions are revoked (session-revoked, as any
revoke) and every session deleted, the phone's sign-in requests and the user's permissions
deleted, the user row deleted — the phone number goes with it — and
``pin.identity.user-erased.v1`` written to the outbox beside the proof in
``identity.erasures``. The other contexts act on that event.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

import asyncpg
import structlog

from pin_sessions.identity import devices, events, repository
from pin_sessions.identity.domain import RevokedReason
from pin_sessions.identity.errors import RecentSignInRequired, UnknownPhoneNumber, UserErased
from pin_sessions.platform import outbox
from pin_sessions.platform.database import Connection, Database
from pin_sessions.platform.errors import ServiceUnavailable
from pin_sessions.platform.logging import mask_ip
from pin_sessions.platform.tokens import UserPrincipal

log = structlog.get_logger(__name__)

# SPEC §10: erasing an account asks for an access token issued this recently.
RECENT_SIGN_IN = timedelta(minutes=10)


# Each retry follows a sign-in that opened a session during the erasure; a few suffice.
MAX_ATTEMPTS = 5


class _ErasedMeanwhile(Exception):
    """Another erasure of the user committed first: roll this one back."""


class RequestedBy(StrEnum):
    USER = "user"
    OPERATOR = "operator"


@dataclass(frozen=True)
class Erasure:
    """The proof of an erasure; ``new`` when this call made it."""

    user_id: uuid.UUID
    requested_at: datetime
    requested_by: RequestedBy
    message_id: uuid.UUID
    new: bool


def _erasure(row: asyncpg.Record, *, new: bool) -> Erasure:
    return Erasure(
        user_id=row["user_id"],
        requested_at=row["requested_at"],
        requested_by=RequestedBy(row["requested_by"]),
        message_id=row["message_id"],
        new=new,
    )


def masked(ip: str | None) -> str | None:
    return None if ip is None else mask_ip(ip)


class UserData:
    """Export and erasure over identity's tables."""

    def __init__(self, database: Database) -> None:
        self._database = database

    async def erasure(self, user_id: uuid.UUID) -> Erasure | None:
        async with self._database.connection() as conn:
            row = await repository.erasure(conn, user_id)
        return None if row is None else _erasure(row, new=False)

    async def erase_own(self, principal: UserPrincipal, now: datetime) -> Erasure:
        """The caller's own erasure, with a token of a recent sign-in (or a refresh)."""
        if now - principal.issued_at > RECENT_SIGN_IN:
            raise RecentSignInRequired(
                "sign in again: erasing an account needs an access token at most "
                f"{int(RECENT_SIGN_IN.total_seconds() // 60)} minutes old"
            )
        return await self.erase(principal.user_id, RequestedBy.USER, now)

    async def erase(self, user_id: uuid.UUID, requested_by: RequestedBy, now: datetime) -> Erasure:
        """Erase the user, or return the erasure that already did it.

        An id that never was a user's is ``UnknownPhoneNumber``.
        """
        for _ in range(MAX_ATTEMPTS):
            try:
                async with self._database.transaction() as conn:
                    user = await repository.user(conn, user_id)
                    erasure = None
                    if user is not None:
                        erasure = await self._erase(
                            conn, user_id, user["phone_number"], requested_by, now
                        )
                        if erasure is None:
                            raise _ErasedMeanwhile()
                if erasure is not None:
                    log.info(
                        "user erased",
                        userId=str(user_id),
                        requestedBy=requested_by.value,
                        messageId=str(erasure.message_id),
                    )
                    return erasure
            except _ErasedMeanwhile:
                pass  # rolled back: what this call deleted, the winner has deleted too
            except asyncpg.ForeignKeyViolationError:
                continue  # a sign-in opened a session meanwhile: erase it too
            async with self._database.connection() as conn:
                done = await repository.erasure(conn, user_id)
            if done is None:
                raise UnknownPhoneNumber("no such user")
            return _erasure(done, new=False)
        raise ServiceUnavailable("the user kept signing in during the erasure; retry")

    async def _erase(
        self,
        conn: Connection,
        user_id: uuid.UUID,
        phone_number: str,
        requested_by: RequestedBy,
        now: datetime,
    ) -> Erasure | None:
        """None when another erasure deleted the user first.

        The user's rows go before the user row, in the order every sign-in and refresh
        locks them (a request or a session, then the user's key), so an erasure never
        deadlocks with them: it waits for them, and one that opens a session after the
        sessions were deleted makes the user row's DELETE fail its foreign key, and the
        whole erasure runs again.
        """
        by_user = requested_by is RequestedBy.USER
        reason = RevokedReason.REVOKED_BY_USER if by_user else RevokedReason.ADMIN
        await repository.delete_phone_sign_in_requests(conn, phone_number)
        revoked = await repository.revoke_all_user_sessions(conn, user_id, now, reason.value)
        await repository.delete_user_sessions(conn, user_id)
        await repository.delete_user_permissions(conn, user_id)
        if not await repository.delete_user(conn, user_id):
            return None
        published = [
            events.session_revoked(session.id, user_id, now, reason) for session in revoked
        ]
        erased = events.user_erased(user_id, now)
        published.append(erased)
        await repository.insert_erasure(conn, user_id, now, requested_by.value, erased.message_id)
        await outbox.append_all(conn, published, now=now)
        return Erasure(user_id, now, requested_by, erased.message_id, new=True)

    async def export(self, user_id: uuid.UUID, now: datetime) -> Mapping[str, Any]:
        """Everything identity holds about the user, as a document read while it is written.

        Raises ``UserErased`` (or ``UnknownPhoneNumber`` for an id that never was a user)
        before anything is read, so an HTTP answer can still say so.
        """
        async with self._database.connection() as conn:
            user = await repository.user(conn, user_id)
            if user is None:
                if await repository.erasure(conn, user_id) is not None:
                    raise UserErased()
                raise UnknownPhoneNumber("no such user")
            grants = await repository.permission_grants(conn, user_id)
        return {
            "userId": user_id,
            "exportedAt": now,
            "phoneNumber": user["phone_number"],
            "createdAt": user["created_at"],
            "permissions": [
                {"permission": row["permission"], "grantedAt": row["granted_at"]} for row in grants
            ],
            "signInRequests": self._sign_in_requests(user["phone_number"]),
            "sessions": self._sessions(user_id),
        }

    async def _sign_in_requests(self, phone_number: str) -> AsyncIterator[dict[str, Any]]:
        async for row in repository.sign_in_requests_of(self._database, phone_number):
            yield {
                "requestId": row["id"],
                "status": row["status"],
                "createdAt": row["created_at"],
                "expiresAt": row["expires_at"],
                "confirmedAt": row["confirmed_at"],
                "attempts": row["attempts"],
                "ipAddress": masked(row["ip_address"]),
            }

    async def _sessions(self, user_id: uuid.UUID) -> AsyncIterator[dict[str, Any]]:
        async for row in repository.refresh_sessions_of(self._database, user_id):
            yield {
                "sessionId": row["id"],
                "familyId": row["family_id"],
                "status": row["status"],
                "createdAt": row["created_at"],
                "lastUsedAt": row["last_used_at"],
                "expiresAt": row["expires_at"],
                "rotatedAt": row["rotated_at"],
                "revokedAt": row["revoked_at"],
                "revokedReason": row["revoked_reason"],
                # The sign-in its family began with (the tokens' auth_time); null on rows
                # written before it was stored.
                "signedInAt": row["signed_in_at"],
                "device": vars(devices.describe(row["device_user_agent"])),
                "userAgent": row["device_user_agent"],
                "ipAddress": masked(row["device_ip"]),
            }

"""Identity's use cases, one method each, each with its explicit transaction.

Decisions take ``now`` from the caller; the HTTP edge reads the clock once per request.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from pin_sessions.identity import domain, events, repository
from pin_sessions.identity.codes import CodeSender
from pin_sessions.identity.domain import RefreshVerdict, RevokedReason, SessionStatus
from pin_sessions.identity.errors import (
    CodeDeliveryFailed,
    ConfirmationNotFound,
    InvalidConfirmationCode,
    OwnSessionNotFound,
    RefreshTokenReused,
    SessionNotFound,
    UnknownPhoneNumber,
)
from pin_sessions.identity.signing import TokenSigner
from pin_sessions.platform import outbox
from pin_sessions.platform.auth_errors import SessionNotActive
from pin_sessions.platform.database import Connection, Database
from pin_sessions.platform.devices import truncate_user_agent
from pin_sessions.platform.ids import new_id
from pin_sessions.platform.secrets import ServerSecrets
from pin_sessions.platform.tokens import UserPrincipal

CODE_KEY_PURPOSE = "sign-in-code"
SUCCESSOR_KEY_PURPOSE = "refresh-successor"

# Draws the code of a new sign-in request, given its id.
CodeIssuer = Callable[[uuid.UUID], str]


def random_code(request_id: uuid.UUID) -> str:
    """Production's issuer: the CSPRNG; the request id plays no part."""
    del request_id
    return domain.new_code()


@dataclass(frozen=True)
class SignInRequest:
    request_id: uuid.UUID
    expires_at: datetime


@dataclass(frozen=True)
class Device:
    """Where a session is used from, as the request told us."""

    user_agent: str
    ip: str | None


@dataclass(frozen=True)
class Family:
    """A rotation chain: one sign-in of one user on one device, and every refresh since."""

    user_id: uuid.UUID
    id: uuid.UUID  # the id of its first session
    # The sign-in's instant: the auth_time of every access token of the family (SPEC §11).
    signed_in_at: datetime


@dataclass(frozen=True)
class TokenPair:
    user_id: uuid.UUID
    session_id: uuid.UUID
    access_token: str
    access_token_expires_at: datetime
    refresh_token: str
    refresh_token_expires_at: datetime


class IdentityOperations:
    """Sign-in, refresh, revoke and the device list over identity's tables."""

    def __init__(
        self,
        database: Database,
        secrets: ServerSecrets,
        signer: TokenSigner,
        sender: CodeSender,
        *,
        refresh_reuse_interval: timedelta,
        limits: domain.SignInLimits,
        issue_code: CodeIssuer = random_code,
    ) -> None:
        self._database = database
        self._limits = limits
        self._code_key = secrets.derived_key(CODE_KEY_PURPOSE)
        self._successor_key = secrets.derived_key(SUCCESSOR_KEY_PURPOSE)
        self._signer = signer
        self._sender = sender
        self._issue_code = issue_code
        self._reuse_interval = refresh_reuse_interval

    async def request_sign_in(
        self, phone_number: str, ip: str | None, now: datetime
    ) -> SignInRequest:
        """Send a code for ``phone_number`` within the limits of SPEC §8.

        The request is committed before the code goes out, so parallel requests count it
        while it is in flight. When the gateway does not take the code the request is
        withdrawn again: it counts against no limit and cannot be confirmed.
        """
        request_id = new_id()
        code = self._issue_code(request_id)
        request = repository.NewRequest(
            id=request_id,
            phone_number=phone_number,
            code_hash=domain.code_hash(self._code_key, request_id, code),
            created_at=now,
            expires_at=now + domain.CONFIRMATION_TTL,
            ip_address=ip,
            ip_network=domain.ip_network(ip),
        )
        async with self._database.transaction() as conn:
            await repository.lock_sign_in_requests(conn)
            edges = await repository.limit_edges(
                conn, phone_number, request.ip_network, self._limits, now
            )
            refusal = domain.sign_in_request_refusal(edges, self._limits, now)
            if refusal is not None:
                raise refusal
            await repository.insert_request(conn, request)
        try:
            await self._sender.send(request.id, phone_number, code, now)
        except CodeDeliveryFailed:
            async with self._database.connection() as conn:
                await repository.delete_unsent_request(conn, request.id)
            raise
        return SignInRequest(request.id, request.expires_at)

    async def confirm_sign_in(
        self,
        request_id: uuid.UUID,
        code: str,
        anonymous_id: uuid.UUID | None,
        device: Device,
        now: datetime,
    ) -> TokenPair:
        """Trade a right code for a new session; the user is created on the first sign-in."""
        hashed = domain.code_hash(self._code_key, request_id, code)
        max_attempts = domain.MAX_CODE_ATTEMPTS
        async with self._database.transaction() as conn:
            phone = await repository.confirm_request(conn, request_id, hashed, now, max_attempts)
            if phone is not None:
                user_id = await repository.user_for_phone(conn, phone, new_id(), now)
                session_id = new_id()
                family = Family(user_id, session_id, signed_in_at=now)
                pair = await self._open_session(
                    conn, family, session_id, domain.new_refresh_token(), device, now
                )
                event = events.user_signed_in(user_id, session_id, anonymous_id, now)
                await outbox.append(conn, event, now=now)
                return pair
        # Not confirmed: a wrong guess must stay counted, so it commits on its own.
        async with self._database.connection() as conn:
            if await repository.count_wrong_code(conn, request_id, hashed, now, max_attempts):
                raise InvalidConfirmationCode()
            state = await repository.request_state(conn, request_id)
        if state is None:
            raise ConfirmationNotFound()
        raise domain.confirmation_refusal(state, now)

    async def refresh(self, refresh_token: str, ip: str | None, now: datetime) -> TokenPair:
        """Rotate the session of ``refresh_token``; replay within the grace, revoke on reuse.

        A rotation chain is one device: the successor keeps the user agent the chain
        signed in with, whatever sent this refresh, and takes ``ip``, where it is now.
        """
        parent_hash = domain.token_hash(refresh_token)
        successor_token = domain.successor_token(self._successor_key, refresh_token)
        successor_id = new_id()
        async with self._database.transaction() as conn:
            parent = await repository.rotate_session(conn, parent_hash, successor_id, now)
            if parent is not None:
                family = Family(parent.user_id, parent.family_id, parent.signed_in_at)
                device = Device(parent.device_user_agent, ip)
                return await self._open_session(
                    conn, family, successor_id, successor_token, device, now
                )
            state = await repository.session_by_token_hash(conn, parent_hash)
            if state is None:
                raise SessionNotFound()
            if domain.refresh_verdict(state, now, self._reuse_interval) is RefreshVerdict.REPLAY:
                assert state.replaced_by is not None
                return await self._replay(conn, state.replaced_by, successor_token, now)
            for revoked in await repository.revoke_family(conn, state.family_id, now):
                await self._publish_revoked(conn, revoked, RevokedReason.TOKEN_REUSE, now)
        # Reached only after the family's revocation has committed.
        raise RefreshTokenReused()

    async def _replay(
        self, conn: Connection, successor_id: uuid.UUID, successor_token: str, now: datetime
    ) -> TokenPair:
        """The pair a racing refresh already produced, while its session is still live."""
        successor = await repository.session_by_id(conn, successor_id)
        if successor is None:
            raise SessionNotFound()
        if successor.status is not SessionStatus.ACTIVE or successor.expires_at <= now:
            raise domain.session_refusal(successor, now)
        family = Family(successor.user_id, successor.family_id, successor.signed_in_at)
        return await self._pair(
            conn, family, successor.id, successor_token, successor.expires_at, now
        )

    async def logout(self, principal: UserPrincipal, now: datetime) -> None:
        """Revoke the session the access token belongs to."""
        async with self._database.transaction() as conn:
            revoked = await repository.revoke_user_session(
                conn, principal.session_id, principal.user_id, now, RevokedReason.LOGOUT
            )
            if revoked is None:
                # A refresh or another revoke got there first: this token's session is over.
                raise SessionNotActive()
            await self._publish_revoked(conn, revoked, RevokedReason.LOGOUT, now)

    async def revoke_session(
        self, principal: UserPrincipal, session_id: uuid.UUID, now: datetime
    ) -> None:
        """Revoke one of the user's own live sessions; anyone else's is not found."""
        reason = RevokedReason.REVOKED_BY_USER
        async with self._database.transaction() as conn:
            revoked = await repository.revoke_user_session(
                conn, session_id, principal.user_id, now, reason
            )
            if revoked is None:
                raise OwnSessionNotFound("no live session with this id")
            await self._publish_revoked(conn, revoked, reason, now)

    async def revoke_other_sessions(self, principal: UserPrincipal, now: datetime) -> None:
        """Revoke every live session of the user except the calling one."""
        async with self._database.transaction() as conn:
            others = await repository.revoke_other_user_sessions(
                conn, principal.user_id, principal.session_id, now
            )
            for revoked in others:
                await self._publish_revoked(conn, revoked, RevokedReason.REVOKED_BY_USER, now)

    async def devices(
        self, principal: UserPrincipal, now: datetime
    ) -> list[repository.DeviceSession]:
        async with self._database.connection() as conn:
            return await repository.live_sessions(conn, principal.user_id, now)

    async def grant_permissions(
        self, phone_number: str, permissions: Iterable[str], now: datetime
    ) -> uuid.UUID:
        """Grant to the phone's user, created now if it never signed in (operators provision)."""
        async with self._database.transaction() as conn:
            user_id = await repository.user_for_phone(conn, phone_number, new_id(), now)
            for permission in permissions:
                await repository.grant_permission(conn, user_id, permission, now)
        return user_id

    async def withdraw_permissions(
        self, phone_number: str, permissions: Iterable[str]
    ) -> uuid.UUID:
        async with self._database.transaction() as conn:
            user_id = await repository.find_user_by_phone(conn, phone_number)
            if user_id is None:
                raise UnknownPhoneNumber()
            for permission in permissions:
                await repository.withdraw_permission(conn, user_id, permission)
        return user_id

    async def _open_session(
        self,
        conn: Connection,
        family: Family,
        session_id: uuid.UUID,
        refresh_token: str,
        device: Device,
        now: datetime,
    ) -> TokenPair:
        expires_at = now + domain.REFRESH_SESSION_TTL
        await repository.insert_session(
            conn,
            repository.NewSession(
                id=session_id,
                user_id=family.user_id,
                family_id=family.id,
                token_hash=domain.token_hash(refresh_token),
                created_at=now,
                expires_at=expires_at,
                device_user_agent=truncate_user_agent(device.user_agent),
                device_ip=device.ip,
                signed_in_at=family.signed_in_at,
            ),
        )
        return await self._pair(conn, family, session_id, refresh_token, expires_at, now)

    async def _pair(
        self,
        conn: Connection,
        family: Family,
        session_id: uuid.UUID,
        refresh_token: str,
        refresh_expires_at: datetime,
        now: datetime,
    ) -> TokenPair:
        user_id = family.user_id
        granted = await repository.permissions(conn, user_id)
        access = await self._signer.access_token(
            conn,
            user_id,
            session_id,
            now=now,
            auth_time=family.signed_in_at,
            permissions=granted,
        )
        return TokenPair(
            user_id=user_id,
            session_id=session_id,
            access_token=access.token,
            access_token_expires_at=access.expires_at,
            refresh_token=refresh_token,
            refresh_token_expires_at=refresh_expires_at,
        )

    async def _publish_revoked(
        self,
        conn: Connection,
        revoked: repository.RevokedSession,
        reason: RevokedReason,
        now: datetime,
    ) -> None:
        event = events.session_revoked(revoked.id, revoked.user_id, now, reason)
        await outbox.append(conn, event, now=now)

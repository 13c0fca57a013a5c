"""Minting the service's tokens with the Current signing key (SPEC §3, §4, §8).

Every token is signed with the key that is Current when it is minted, read in the
caller's transaction: after ``keys rotate --now`` the very next token, on any instance,
is signed by the new key. Only the decrypted key is kept in process, by kid. On a
database without keys the first signer creates the first one (two racing signers end
with one: the second insert does nothing and both read the winner).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec

from pin_sessions.identity import repository
from pin_sessions.identity.keys import KeyCipher, KeyStatus, insert_new_key
from pin_sessions.platform.database import Connection
from pin_sessions.platform.ids import new_id
from pin_sessions.platform.tokens import (
    ACCESS_TOKEN_TTL,
    ALGORITHM,
    SERVICE_AUDIENCE,
    TOKEN_TYPE,
    USER_AUDIENCE,
    auth_time_claim,
)


@dataclass(frozen=True)
class SignedToken:
    token: str
    expires_at: datetime


class TokenSigner:
    """Signs access tokens (users) and m2m tokens (services) as ``issuer``."""

    def __init__(self, cipher: KeyCipher, issuer: str, *, m2m_token_ttl: timedelta) -> None:
        self._cipher = cipher
        self.issuer = issuer
        self.m2m_token_ttl = m2m_token_ttl
        self._opened: tuple[str, ec.EllipticCurvePrivateKey] | None = None

    async def access_token(
        self,
        conn: Connection,
        user_id: uuid.UUID,
        session_id: uuid.UUID,
        *,
        now: datetime,
        auth_time: datetime,
        permissions: Iterable[str] = (),
    ) -> SignedToken:
        """A user's access token; ``auth_time`` is when the sign-in that started the
        token's refresh family happened (RFC 9068 §2.2.1), to the microsecond."""
        claims: dict[str, Any] = {
            "aud": USER_AUDIENCE,
            "sub": str(user_id),
            "sid": str(session_id),
            "auth_time": auth_time_claim(auth_time),
        }
        granted = sorted(set(permissions))
        if granted:
            claims["permissions"] = granted
        return await self._sign(conn, claims, now, ACCESS_TOKEN_TTL)

    async def m2m_token(
        self, conn: Connection, client_id: str, scopes: Iterable[str], *, now: datetime
    ) -> SignedToken:
        claims = {
            "aud": SERVICE_AUDIENCE,
            "sub": client_id,
            "client_id": client_id,
            "scope": " ".join(sorted(set(scopes))),
        }
        return await self._sign(conn, claims, now, self.m2m_token_ttl)

    async def _sign(
        self, conn: Connection, claims: dict[str, Any], now: datetime, ttl: timedelta
    ) -> SignedToken:
        kid, key = await self._current_key(conn, now)
        expires_at = now + ttl
        payload = {
            "iss": self.issuer,
            **claims,
            "jti": str(new_id()),
            "iat": int(now.timestamp()),
            "exp": int(expires_at.timestamp()),
        }
        headers = {"kid": kid, "typ": TOKEN_TYPE}
        return SignedToken(
            jwt.encode(payload, key, algorithm=ALGORITHM, headers=headers), expires_at
        )

    async def _current_key(
        self, conn: Connection, now: datetime
    ) -> tuple[str, ec.EllipticCurvePrivateKey]:
        row = await repository.current_signing_key(conn)
        if row is None:
            await insert_new_key(conn, self._cipher, KeyStatus.CURRENT, now)
            row = await repository.current_signing_key(conn)
            assert row is not None  # ours, or the racing signer's that made ours a no-op
        kid: str = row["kid"]
        if self._opened is None or self._opened[0] != kid:
            self._opened = (kid, self._cipher.open(kid, row["private_key"]))
        return self._opened

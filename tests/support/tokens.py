"""Tokens for tests, minted as identity mints them: with the test database's Current key."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

import httpx
import jwt
from cryptography.hazmat.primitives.asymmetric import ec
from prometheus_client import CollectorRegistry

from pin_sessions.bootstrap.identity import build_token_signer
from pin_sessions.bootstrap.keys import build_key_cipher
from pin_sessions.identity import repository
from pin_sessions.identity.keys import KeyCipher, PublishedKeys
from pin_sessions.identity.signing import TokenSigner
from pin_sessions.platform.database import Database
from pin_sessions.platform.key_set import KeySet
from pin_sessions.platform.runtime import Runtime
from pin_sessions.platform.tokens import TokenVerifier, UserPrincipal
from pin_sessions.settings import DEFAULT_PUBLIC_URL


class Tokens:
    """Access and m2m tokens of the service, and a forgery of one."""

    def __init__(self, database: Database, signer: TokenSigner, cipher: KeyCipher) -> None:
        self.database = database
        self.signer = signer
        self.cipher = cipher

    @classmethod
    def of(cls, runtime: Runtime) -> Tokens:
        return cls(runtime.database, build_token_signer(runtime), build_key_cipher(runtime))

    async def access(
        self,
        user_id: uuid.UUID,
        session_id: uuid.UUID,
        *,
        now: datetime,
        auth_time: datetime | None = None,
        permissions: Iterable[str] = (),
    ) -> str:
        """A user's access token; its sign-in (``auth_time``) is ``now`` unless given."""
        async with self.database.connection() as conn:
            signed = await self.signer.access_token(
                conn,
                user_id,
                session_id,
                now=now,
                auth_time=now if auth_time is None else auth_time,
                permissions=permissions,
            )
        return signed.token

    async def without_auth_time(
        self, user_id: uuid.UUID, session_id: uuid.UUID, *, now: datetime
    ) -> str:
        """An access token as identity minted them before auth_time existed, really signed."""
        real = await self.access(user_id, session_id, now=now)
        claims: dict[str, Any] = jwt.decode(real, options={"verify_signature": False})
        del claims["auth_time"]
        async with self.database.connection() as conn:
            row = await repository.current_signing_key(conn)
        assert row is not None
        key = self.cipher.open(row["kid"], row["private_key"])
        return jwt.encode(claims, key, algorithm="ES256", headers=jwt.get_unverified_header(real))

    async def verified_user(
        self, user_id: uuid.UUID, *, now: datetime, auth_time: datetime, runtime: Runtime
    ) -> UserPrincipal:
        """The user an API reads from a fresh access token of a sign-in at ``auth_time``:
        what survives of that instant once the token is signed and verified."""
        token = await self.access(user_id, uuid.uuid4(), now=now, auth_time=auth_time)
        keys = KeySet(
            PublishedKeys(self.database),
            CollectorRegistry(),
            clock=runtime.clock,
            wait_limit=timedelta(seconds=10),
        )
        try:
            verified = await TokenVerifier(keys, DEFAULT_PUBLIC_URL).verify(token, now=now)
        finally:
            await keys.close()
        assert isinstance(verified.principal, UserPrincipal)
        return verified.principal

    async def m2m(self, client: str, scopes: Iterable[str], *, now: datetime) -> str:
        async with self.database.connection() as conn:
            return (await self.signer.m2m_token(conn, client, scopes, now=now)).token

    async def forged_access(
        self, user_id: uuid.UUID, session_id: uuid.UUID, *, now: datetime
    ) -> str:
        """A token like a real one, naming the real key, signed with another key."""
        real = await self.access(user_id, session_id, now=now)
        header = jwt.get_unverified_header(real)
        claims: dict[str, Any] = jwt.decode(real, options={"verify_signature": False})
        impostor = ec.generate_private_key(ec.SECP256R1())
        return jwt.encode(claims, impostor, algorithm="ES256", headers=header)


async def verified_claims(http: httpx.AsyncClient, token: str, *, audience: str) -> dict[str, Any]:
    """The token's claims, verified as another service would: with the API's published JWKS."""
    jwks = (await http.get("/.well-known/jwks.json")).json()
    key = jwt.PyJWKSet.from_dict(jwks)[jwt.get_unverified_header(token)["kid"]]
    claims: dict[str, Any] = jwt.decode(
        token,
        key,
        algorithms=["ES256"],
        audience=audience,
        issuer=DEFAULT_PUBLIC_URL,
        options={"verify_exp": False, "verify_iat": False},
    )
    return claims

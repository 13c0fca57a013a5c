"""Bearer authentication shared by every context (SPEC §4, last paragraph).

Two kinds of token, both JWT HS256 signed with the server secret, ``iss=pin-identity``:

* access tokens of users: ``sub`` (user id), ``sid`` (refresh session id), ``iat``,
  ``exp`` (15 min), optional ``permissions``; accepted only while the ``sid``
  session is still Active and unexpired — asked through the :class:`SessionLiveness`
  port, which the identity context implements;
* m2m tokens of services: ``sub`` (client), ``scope`` (space separated), no ``sid``.

A user token is never accepted where an m2m scope is required, nor the reverse.
Expiry is judged against the injected clock, not the wall clock, so tests can move time.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

import jwt
from fastapi import Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from pin_sessions.platform.clock import Clock
from pin_sessions.platform.errors import Forbidden, Unauthorized

ISSUER = "pin-identity"
ALGORITHM = "HS256"
ACCESS_TOKEN_TTL = timedelta(minutes=15)
M2M_TOKEN_TTL = timedelta(hours=1)
# Tolerated clock skew between the process that issued a token and the one reading it.
ISSUED_AT_LEEWAY = timedelta(seconds=30)


class AuthenticationRequired(Unauthorized):
    code = "AUTH_REQUIRED"
    title = "Authentication required"


class InvalidToken(Unauthorized):
    code = "AUTH_INVALID_TOKEN"
    title = "The bearer token is not valid"


class SessionNotActive(Unauthorized):
    code = "AUTH_SESSION_NOT_ACTIVE"
    title = "The session of this token is no longer active"


class UserTokenRequired(Unauthorized):
    """An m2m token where a user acts: no user is authenticated, hence 401 (SPEC §4)."""

    code = "AUTH_USER_TOKEN_REQUIRED"
    title = "A user's access token is required"


class WrongTokenKind(Forbidden):
    """A user's token on an internal API: authenticated, but not as a service."""

    code = "AUTH_WRONG_TOKEN_KIND"
    title = "This kind of token is not accepted here"


class MissingScope(Forbidden):
    code = "AUTH_MISSING_SCOPE"
    title = "The token lacks the required scope"


class MissingPermission(Forbidden):
    code = "AUTH_MISSING_PERMISSION"
    title = "The user lacks the required permission"


@dataclass(frozen=True)
class UserPrincipal:
    user_id: uuid.UUID
    session_id: uuid.UUID
    permissions: frozenset[str]
    # The token's ``iat``: erasing an account asks for a recent one (SPEC §10).
    issued_at: datetime


@dataclass(frozen=True)
class MachinePrincipal:
    client: str
    scopes: frozenset[str]


Principal = UserPrincipal | MachinePrincipal


class SessionLiveness(Protocol):
    async def is_active(self, session_id: uuid.UUID, user_id: uuid.UUID, now: datetime) -> bool:
        """True while the refresh session is Active and unexpired at ``now``."""
        ...


class TokenCodec:
    """Signs and reads our JWTs."""

    def __init__(self, key: bytes) -> None:
        self._key = key

    def issue_access_token(
        self,
        user_id: uuid.UUID,
        session_id: uuid.UUID,
        *,
        now: datetime,
        permissions: Iterable[str] = (),
    ) -> tuple[str, datetime]:
        expires_at = now + ACCESS_TOKEN_TTL
        claims: dict[str, Any] = {
            "iss": ISSUER,
            "sub": str(user_id),
            "sid": str(session_id),
            "iat": int(now.timestamp()),
            "exp": int(expires_at.timestamp()),
        }
        granted = sorted(set(permissions))
        if granted:
            claims["permissions"] = granted
        return jwt.encode(claims, self._key, algorithm=ALGORITHM), expires_at

    def issue_m2m_token(
        self, client: str, scopes: Iterable[str], *, now: datetime, ttl: timedelta = M2M_TOKEN_TTL
    ) -> str:
        claims = {
            "iss": ISSUER,
            "sub": client,
            "scope": " ".join(sorted(set(scopes))),
            "iat": int(now.timestamp()),
            "exp": int((now + ttl).timestamp()),
        }
        return jwt.encode(claims, self._key, algorithm=ALGORITHM)

    def decode(self, token: str, *, now: datetime) -> Principal:
        """Verify signature, issuer and expiry at ``now``; raise :class:`InvalidToken` otherwise."""
        try:
            claims = jwt.decode(
                token,
                self._key,
                algorithms=[ALGORITHM],
                issuer=ISSUER,
                # Both time claims are judged below against the injected clock, not the
                # machine's: PyJWT would check them against the wall clock.
                options={
                    "verify_exp": False,
                    "verify_iat": False,
                    "require": ["iss", "sub", "iat", "exp"],
                },
            )
        except jwt.PyJWTError as exc:
            raise InvalidToken() from exc
        try:
            if float(claims["exp"]) <= now.timestamp():
                raise InvalidToken("the token has expired")
            if float(claims["iat"]) > now.timestamp() + ISSUED_AT_LEEWAY.total_seconds():
                raise InvalidToken("the token is issued in the future")
            if "sid" in claims:
                return UserPrincipal(
                    user_id=uuid.UUID(str(claims["sub"])),
                    session_id=uuid.UUID(str(claims["sid"])),
                    permissions=frozenset(_strings(claims.get("permissions", []))),
                    issued_at=datetime.fromtimestamp(float(claims["iat"]), UTC),
                )
            return MachinePrincipal(
                client=str(claims["sub"]), scopes=frozenset(str(claims.get("scope", "")).split())
            )
        except (TypeError, ValueError) as exc:
            raise InvalidToken() from exc


def _strings(value: object) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ValueError("permissions must be a list of strings")
    return value


def _as_user(principal: Principal | None) -> UserPrincipal | None:
    if principal is None or isinstance(principal, UserPrincipal):
        return principal
    raise UserTokenRequired("an m2m token cannot act as a user")


_bearer = HTTPBearer(auto_error=False, description="Access token (users) or m2m token (services)")


class Authenticator:
    """Who a request's Bearer token says is calling, judged as each route needs.

    The FastAPI dependencies routes declare live in ``platform.http.dependencies``; they
    call these methods on the authenticator the composition root put on the app.
    """

    def __init__(self, codec: TokenCodec, liveness: SessionLiveness, clock: Clock) -> None:
        self._codec = codec
        self._liveness = liveness
        self._clock = clock

    async def _claimed(self, request: Request, now: datetime) -> Principal | None:
        """Whom the token names, judged by the token alone (format, signature, expiry)."""
        if not request.headers.get("authorization"):
            return None  # a guest: most requests, the heartbeat's above all
        credentials: HTTPAuthorizationCredentials | None = await _bearer(request)
        if credentials is None:
            raise InvalidToken("the Authorization header must be 'Bearer <token>'")
        return self._codec.decode(credentials.credentials, now=now)

    async def _principal(self, request: Request) -> Principal | None:
        now = self._clock.now()
        principal = await self._claimed(request, now)
        if isinstance(principal, UserPrincipal) and not await self._liveness.is_active(
            principal.session_id, principal.user_id, now
        ):
            raise SessionNotActive()
        return principal

    async def optional_user(self, request: Request) -> UserPrincipal | None:
        """No credentials → None (a guest); bad or non-user credentials → 401."""
        return _as_user(await self._principal(request))

    async def claimed_user(self, request: Request) -> UserPrincipal | None:
        """``optional_user`` without the database: whether the session is still live is not asked.

        A token refused by its own content (malformed, badly signed, expired, a service's)
        is a 401 all the same. For a request that must stay one statement when it can.
        """
        return _as_user(await self._claimed(request, self._clock.now()))

    async def user(self, request: Request, permission: str | None = None) -> UserPrincipal:
        """A signed-in user, holding ``permission`` when one is named."""
        principal = await self.optional_user(request)
        if principal is None:
            raise AuthenticationRequired()
        if permission is not None and permission not in principal.permissions:
            raise MissingPermission(f"permission {permission!r} is required")
        return principal

    async def machine(self, request: Request, *any_of_scopes: str) -> MachinePrincipal:
        """A service holding at least one of ``any_of_scopes``."""
        principal = await self._principal(request)
        if principal is None:
            raise AuthenticationRequired()
        if not isinstance(principal, MachinePrincipal):
            raise WrongTokenKind("a user token cannot call an internal API")
        if not principal.scopes.intersection(any_of_scopes):
            raise MissingScope(f"one of the scopes {sorted(any_of_scopes)} is required")
        return principal

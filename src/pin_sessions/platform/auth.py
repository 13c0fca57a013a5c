"""Bearer authentication shared by every context (SPEC §4, last paragraph).

Tokens are verified by :class:`~pin_sessions.platform.tokens.TokenVerifier` (signature,
issuer, audience, lifetime); the :class:`Authenticator` judges a request's token as its
route needs:

* a user's access token is accepted only while its ``sid`` session is still Active and
  unexpired — asked through the :class:`SessionLiveness` port, which identity implements;
* a service's m2m token only while its client is not disabled — asked through the
  :class:`ClientStatus` port, which identity implements with a copy at most 30 s old
  while the database answers, refreshed in the background (SPEC §11).

A user token is never accepted where an m2m scope is required, nor the reverse. The
ports and the key source are wired by the composition root: platform imports no context.

Every refused token is logged (``token refused``, at info, with the request id) with its
:class:`~pin_sessions.platform.tokens.Refusal`: the client's answer names no reason, so the
log is where an operator learns that a token was signed for another issuer, or has expired.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Protocol

import structlog
from fastapi import Request

from pin_sessions.platform.auth_errors import (
    AuthenticationRequired,
    ClientDisabled,
    MissingPermission,
    MissingScope,
    SessionNotActive,
    UserTokenRequired,
    WrongTokenKind,
)
from pin_sessions.platform.clock import Clock
from pin_sessions.platform.http.headers import OWS, single_header
from pin_sessions.platform.tokens import (
    InvalidToken,
    MachinePrincipal,
    Principal,
    Refusal,
    TokenVerifier,
    UserPrincipal,
)

# The refusals it raises have one home, auth_errors: they are imported from there.
__all__ = [
    "Authenticator",
    "ClientStatus",
    "InvalidToken",
    "MachinePrincipal",
    "SessionLiveness",
    "UserPrincipal",
]


class SessionLiveness(Protocol):
    async def is_active(self, session_id: uuid.UUID, user_id: uuid.UUID, now: datetime) -> bool:
        """True while the refresh session is Active and unexpired at ``now``."""
        ...


class ClientStatus(Protocol):
    async def is_disabled(self, client_id: str) -> bool:
        """True when ``client_id`` names a registered client an operator disabled."""
        ...


log = structlog.get_logger(__name__)


def _refused(reason: Refusal, **fields: str | None) -> None:
    """One line per refused token; the request id comes from the request's log context."""
    log.info("token refused", reason=reason.value, **fields)


def _as_user(principal: Principal | None) -> UserPrincipal | None:
    if principal is None or isinstance(principal, UserPrincipal):
        return principal
    raise UserTokenRequired("an m2m token cannot act as a user")


AUTHORIZATION_HEADER = "Authorization"


def bearer_token(request: Request) -> str | None:
    """The token of ``Authorization: Bearer <token>``; None when no credentials are given.

    The header is read once (a second one is a 400 ``DUPLICATE_HEADER``); an empty one is
    no credentials at all. The scheme is case-insensitive (RFC 9110 §11.1); anything but a
    Bearer token is an invalid token.
    """
    header = single_header(request, AUTHORIZATION_HEADER)
    if not header:
        return None
    scheme, _, token = header.partition(" ")
    token = token.strip(OWS)
    if scheme.lower() != "bearer" or not token:
        raise InvalidToken("the Authorization header must be 'Bearer <token>'")
    return token


class Authenticator:
    """Who a request's Bearer token says is calling, judged as each route needs.

    The FastAPI dependencies routes declare live in ``platform.http.dependencies``; they
    call these methods on the authenticator the composition root put on the app.
    """

    def __init__(
        self,
        verifier: TokenVerifier,
        liveness: SessionLiveness,
        clients: ClientStatus,
        clock: Clock,
    ) -> None:
        self._verifier = verifier
        self._liveness = liveness
        self._clients = clients
        self._clock = clock

    async def _claimed(self, request: Request, now: datetime) -> Principal | None:
        """Whom the token names, judged by the token alone (format, signature, expiry)."""
        try:
            token = bearer_token(request)
            if token is None:
                return None  # a guest: most requests, the heartbeat's above all
            return (await self._verifier.verify(token, now=now)).principal
        except InvalidToken as exc:
            if exc.reason is Refusal.ISSUER:
                _refused(exc.reason, tokenIssuer=exc.issuer, issuer=self._verifier.issuer)
            else:
                _refused(exc.reason)
            raise

    async def _principal(self, request: Request) -> Principal | None:
        now = self._clock.now()
        principal = await self._claimed(request, now)
        if isinstance(principal, UserPrincipal) and not await self._liveness.is_active(
            principal.session_id, principal.user_id, now
        ):
            _refused(Refusal.SESSION_NOT_ACTIVE)
            raise SessionNotActive()
        return principal

    async def optional_user(self, request: Request) -> UserPrincipal | None:
        """No credentials → None (a guest); bad or non-user credentials → 401."""
        return _as_user(await self._principal(request))

    async def claimed_user(self, request: Request) -> UserPrincipal | None:
        """``optional_user`` without asking whether the session is still live.

        A token refused by its own content (malformed, badly signed, expired, a service's)
        is a 401 all the same; its key comes from the in-process key set. For a request
        that must stay one statement when it can.
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
        if await self._clients.is_disabled(principal.client):
            _refused(Refusal.CLIENT_DISABLED, clientId=principal.client)
            raise ClientDisabled()
        if not principal.scopes.intersection(any_of_scopes):
            raise MissingScope(f"one of the scopes {sorted(any_of_scopes)} is required")
        return principal

"""The OAuth 2.0 authorization server other services talk to (SPEC §8).

* the client-credentials grant (RFC 6749 §4.4): an authenticated client gets an m2m
  token for its scopes, or the subset it asks for;
* token introspection (RFC 7662): whether a token is active now — signed by a published
  key, unexpired, and, for a user's token, its refresh session still live; for a
  service's, its client not disabled (asked of the table, not of a cache);
* the metadata document (RFC 8414).

The HTTP edge (``oauth_http``) parses the forms and renders the RFC 6749 errors.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pin_sessions.identity.client_authentication import ClientAuthentication
from pin_sessions.identity.clients import Client, ServiceClients, granted_scopes
from pin_sessions.identity.liveness import RefreshSessionLiveness
from pin_sessions.identity.signing import TokenSigner
from pin_sessions.platform.database import Database
from pin_sessions.platform.tokens import (
    InvalidToken,
    TokenVerifier,
    UserPrincipal,
    auth_time_claim,
)

TOKEN_PATH = "/oauth/token"  # noqa: S105 - a path, not a secret
INTROSPECTION_PATH = "/oauth/introspect"
JWKS_PATH = "/.well-known/jwks.json"
METADATA_PATH = "/.well-known/oauth-authorization-server"
CLIENT_AUTH_METHODS = ["client_secret_basic", "client_secret_post"]
INACTIVE: dict[str, Any] = {"active": False}


@dataclass(frozen=True)
class TokenGrant:
    access_token: str
    expires_in: int
    scope: str

    def to_json(self) -> dict[str, Any]:
        return {
            "access_token": self.access_token,
            "token_type": "Bearer",
            "expires_in": self.expires_in,
            "scope": self.scope,
        }


class OAuthServer:
    """Token grants and introspection for registered clients."""

    def __init__(
        self,
        database: Database,
        clients: ServiceClients,
        authentication: ClientAuthentication,
        signer: TokenSigner,
        verifier: TokenVerifier,
        liveness: RefreshSessionLiveness,
    ) -> None:
        self._database = database
        self.clients = clients
        self.authentication = authentication
        self._signer = signer
        self._verifier = verifier
        self._liveness = liveness

    async def client_credentials(
        self, client: Client, scope: str | None, now: datetime
    ) -> TokenGrant:
        """An m2m token for ``client``; InvalidScope when it asks beyond its scopes."""
        scopes = granted_scopes(client, scope)
        async with self._database.connection() as conn:
            signed = await self._signer.m2m_token(conn, str(client.client_id), scopes, now=now)
        expires_in = int((signed.expires_at - now).total_seconds())
        return TokenGrant(signed.token, expires_in, " ".join(scopes))

    async def introspect(self, token: str, now: datetime) -> dict[str, Any]:
        """RFC 7662 §2.2: ``{"active": false}`` and nothing more for any token not active."""
        try:
            verified = await self._verifier.verify(token, now=now)
        except InvalidToken:
            return INACTIVE
        principal = verified.principal
        answer: dict[str, Any] = {
            "active": True,
            "token_type": "Bearer",
            "iss": self._verifier.issuer,
            "aud": verified.audience,
            "jti": verified.token_id,
            "iat": int(verified.issued_at.timestamp()),
            "exp": int(verified.expires_at.timestamp()),
        }
        if isinstance(principal, UserPrincipal):
            live = await self._liveness.is_active(principal.session_id, principal.user_id, now)
            if not live:
                return INACTIVE
            answer |= {"sub": str(principal.user_id), "sid": str(principal.session_id)}
            if principal.auth_time is not None:
                answer["auth_time"] = auth_time_claim(principal.auth_time)
            if principal.permissions:
                answer["permissions"] = sorted(principal.permissions)
            return answer
        if await self.clients.is_disabled_now(principal.client):
            return INACTIVE
        return answer | {
            "sub": principal.client,
            "client_id": principal.client,
            "scope": " ".join(sorted(principal.scopes)),
        }

    def metadata(self) -> dict[str, Any]:
        issuer = self._verifier.issuer
        return {
            "issuer": issuer,
            "token_endpoint": issuer + TOKEN_PATH,
            "jwks_uri": issuer + JWKS_PATH,
            "introspection_endpoint": issuer + INTROSPECTION_PATH,
            "grant_types_supported": ["client_credentials"],
            # No authorization endpoint: no response type is supported.
            "response_types_supported": [],
            "token_endpoint_auth_methods_supported": CLIENT_AUTH_METHODS,
            "introspection_endpoint_auth_methods_supported": CLIENT_AUTH_METHODS,
        }

"""The service's tokens, as every process reads them (SPEC §3, §4, §8).

A token is a JWT signed ES256 by one of identity's signing keys, its header naming the
key (``kid``) and the type ``at+jwt`` (RFC 9068). Two audiences, two kinds:

* ``aud: pin-api`` — a user's access token: ``sub`` (user id), ``sid`` (refresh
  session id), ``auth_time`` (when the sign-in that started the refresh family happened,
  to the microsecond: ``auth_time_claim``), optional ``permissions``;
* ``aud: pin-internal`` — a service's m2m token: ``sub`` and ``client_id`` (the
  client's id), ``scope`` (space separated), no ``sid``.

Both carry ``iss`` (``PIN_PUBLIC_URL``), ``jti``, ``iat`` and ``exp``. Identity signs
them (``identity.signing``); this module only verifies, with the keys of a
:class:`~pin_sessions.platform.key_set.KeySet`. Expiry is judged against the injected
clock, not the wall clock, so tests can move time.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

import jwt

from pin_sessions.platform.errors import Unauthorized
from pin_sessions.platform.key_set import KeySet
from pin_sessions.platform.verified_tokens import CachedToken

ALGORITHM = "ES256"
TOKEN_TYPE = "at+jwt"  # noqa: S105 - RFC 9068's JWT type, not a secret
# RFC 9068 §4 allows the media type's long form as well.
_TOKEN_TYPES = frozenset({TOKEN_TYPE, f"application/{TOKEN_TYPE}"})
USER_AUDIENCE = "pin-api"
SERVICE_AUDIENCE = "pin-internal"
ACCESS_TOKEN_TTL = timedelta(minutes=15)
# Tolerated clock skew between the process that issued a token and the one reading it.
ISSUED_AT_LEEWAY = timedelta(seconds=30)
# A kid is the key's RFC 7638 thumbprint: base64url of a SHA-256, 43 characters.
KID_PATTERN = re.compile(r"^[A-Za-z0-9_-]{43}$")
_REQUIRED_CLAIMS = ["iss", "aud", "sub", "jti", "iat", "exp"]


class Refusal(StrEnum):
    """Why a token was refused: logged for the operator, never told the client, whose answer
    is the same ``AUTH_INVALID_TOKEN`` whatever failed (a guesser learns nothing)."""

    MALFORMED = "malformed"  # not a JWT access token of ours: encoding, header, claims
    SIGNATURE = "signature"  # not signed with ES256 by the key it names
    UNKNOWN_KEY = "unknown_key"  # its kid is no published key (rotated away, or made up)
    EXPIRED = "expired"
    NOT_YET_VALID = "not_yet_valid"  # issued in the future, beyond the clock skew allowed
    ISSUER = "issuer"  # signed by us, for another public URL
    AUDIENCE = "audience"  # its claims are not of the kind its audience says
    # Refused by the Authenticator after the token verified (their own codes, unchanged):
    SESSION_NOT_ACTIVE = "session_not_active"  # its refresh session was revoked or ended
    CLIENT_DISABLED = "client_disabled"


class InvalidToken(Unauthorized):
    code = "AUTH_INVALID_TOKEN"
    title = "The bearer token is not valid"
    advice = (
        "The bearer token is malformed, expired, signed by an unknown key, or issued for "
        "another audience or issuer. Get a new access token (refresh, or POST /oauth/token "
        "for a service)."
    )

    def __init__(
        self,
        detail: str | None = None,
        *,
        reason: Refusal = Refusal.MALFORMED,
        issuer: str | None = None,
    ) -> None:
        super().__init__(detail)
        self.reason = reason
        # With Refusal.ISSUER, the issuer the token names: the log shows the mismatch.
        self.issuer = issuer


@dataclass(frozen=True)
class UserPrincipal:
    user_id: uuid.UUID
    session_id: uuid.UUID
    permissions: frozenset[str]
    # When the access token was issued: a recent sign-in can be asked for by this.
    issued_at: datetime
    # The token's auth_time: when the sign-in that started its refresh family happened.
    # None in a token issued before the claim existed (they expire within 15 minutes).
    auth_time: datetime | None = None

    @property
    def signed_in_at(self) -> datetime:
        """The latest the token's sign-in can have happened: ``auth_time``, or else ``iat``.

        A token without auth_time was issued at or after its sign-in, so judging it by its
        issue never calls it stale wrongly; it may only pass for fresher than it is.
        """
        return self.issued_at if self.auth_time is None else self.auth_time


@dataclass(frozen=True)
class MachinePrincipal:
    client: str
    scopes: frozenset[str]


Principal = UserPrincipal | MachinePrincipal


@dataclass(frozen=True)
class VerifiedToken:
    """A token whose signature, issuer, audience and lifetime held at the time asked."""

    principal: Principal
    token_id: str
    issued_at: datetime
    expires_at: datetime

    @property
    def audience(self) -> str:
        return USER_AUDIENCE if isinstance(self.principal, UserPrincipal) else SERVICE_AUDIENCE


class TokenVerifier:
    """Verifies tokens of ``issuer`` with the published keys of ``keys``.

    A token verified before is taken from the key set's cache of verified tokens
    (:mod:`~pin_sessions.platform.verified_tokens`) while its key is still in the set, its
    lifetime judged again at each ``now``: the same answer, without the signature's cost.
    """

    def __init__(self, keys: KeySet, issuer: str) -> None:
        self._keys = keys
        self._verified = keys.verified_tokens
        self.issuer = issuer

    async def verify(self, token: str, *, now: datetime) -> VerifiedToken:
        """The token's content, or :class:`InvalidToken` naming no more than what failed."""
        cached = self._verified.get(token)
        if cached is None:
            verified, kid = await self._verify_signed(token, now)
            self._verified.put(token, CachedToken(verified, kid))
            return verified
        # The key may have left the set since (keys rotate --now): its tokens stop at once.
        if await self._keys.key(cached.kid, now) is None:
            self._verified.forget(token)
            raise InvalidToken("the token's signing key is unknown", reason=Refusal.UNKNOWN_KEY)
        _judge_lifetime(cached.verified.issued_at, cached.verified.expires_at, now)
        return cached.verified

    async def _verify_signed(self, token: str, now: datetime) -> tuple[VerifiedToken, str]:
        """The token's content and its key's kid, its signature checked."""
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as exc:
            raise InvalidToken() from exc
        kid = header.get("kid")
        if not isinstance(kid, str):
            raise InvalidToken(reason=Refusal.UNKNOWN_KEY)
        if header.get("alg") != ALGORITHM:
            raise InvalidToken(reason=Refusal.SIGNATURE)
        if str(header.get("typ", "")).lower() not in _TOKEN_TYPES:
            raise InvalidToken("the token is not an access token")
        # A kid of another shape is no key of ours: refused without asking the key set.
        key = await self._keys.key(kid, now) if KID_PATTERN.fullmatch(kid) else None
        if key is None:
            raise InvalidToken("the token's signing key is unknown", reason=Refusal.UNKNOWN_KEY)
        claims = self._decode(token, key)
        try:
            return _content(claims, now), kid
        except (TypeError, ValueError, OverflowError, OSError) as exc:
            raise InvalidToken() from exc

    def _decode(self, token: str, key: Any) -> dict[str, Any]:
        """The claims of a token signed by ``key`` for this issuer and one of our audiences."""
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key,
                algorithms=[ALGORITHM],
                issuer=self.issuer,
                audience=[USER_AUDIENCE, SERVICE_AUDIENCE],
                # Both time claims are judged below against the injected clock, not the
                # machine's: PyJWT would check them against the wall clock.
                options={"verify_exp": False, "verify_iat": False, "require": _REQUIRED_CLAIMS},
            )
        except jwt.InvalidSignatureError as exc:
            raise InvalidToken(reason=Refusal.SIGNATURE) from exc
        except jwt.InvalidIssuerError as exc:
            # The signature held (PyJWT checks it first): the issuer is ours to report.
            claimed = jwt.decode(token, options={"verify_signature": False}).get("iss")
            raise InvalidToken(reason=Refusal.ISSUER, issuer=str(claimed)[:200]) from exc
        except jwt.InvalidAudienceError as exc:
            raise InvalidToken(reason=Refusal.AUDIENCE) from exc
        except jwt.PyJWTError as exc:
            raise InvalidToken() from exc
        return claims


def auth_time_claim(signed_in_at: datetime) -> float:
    """``auth_time`` as a NumericDate with its fractional part (RFC 7519 §2 allows one).

    Sign-ins are ordered by this instant against the sign-in events' ``SignedInAt``, which
    keeps microseconds: cut to whole seconds, a sign-in half a second after another's would
    look older than it. Microseconds survive the float: near today's epoch seconds a double
    resolves 0.24 µs, and ``datetime.fromtimestamp`` rounds back to the microsecond.
    """
    return round(signed_in_at.timestamp(), 6)


def _judge_lifetime(issued_at: datetime, expires_at: datetime, now: datetime) -> None:
    if expires_at <= now:
        raise InvalidToken("the token has expired", reason=Refusal.EXPIRED)
    if issued_at > now + ISSUED_AT_LEEWAY:
        raise InvalidToken("the token is issued in the future", reason=Refusal.NOT_YET_VALID)


def _content(claims: dict[str, Any], now: datetime) -> VerifiedToken:
    expires_at = _instant(claims["exp"])
    issued_at = _instant(claims["iat"])
    _judge_lifetime(issued_at, expires_at, now)
    audience = claims["aud"]
    principal: Principal
    if audience == USER_AUDIENCE and "sid" in claims:
        auth_time = _instant(claims["auth_time"]) if "auth_time" in claims else None
        # iat is whole seconds, auth_time keeps its fraction: a token signed in the second of
        # its sign-in has auth_time up to a second past iat.
        if auth_time is not None and auth_time.replace(microsecond=0) > issued_at:
            raise ValueError("a token cannot be issued before its sign-in")
        principal = UserPrincipal(
            user_id=uuid.UUID(_text(claims["sub"])),
            session_id=uuid.UUID(_text(claims["sid"])),
            permissions=frozenset(_strings(claims.get("permissions", []))),
            issued_at=issued_at,
            auth_time=auth_time,
        )
    elif audience == SERVICE_AUDIENCE and "sid" not in claims:
        client = _text(claims.get("client_id"))
        if client != claims["sub"]:
            raise ValueError("an m2m token's sub and client_id name the same client")
        principal = MachinePrincipal(client, frozenset(_text(claims.get("scope")).split()))
    else:
        # A list of audiences, or claims of one kind under the other's audience.
        raise InvalidToken(reason=Refusal.AUDIENCE)
    return VerifiedToken(principal, _text(claims["jti"]), issued_at, expires_at)


def _instant(value: object) -> datetime:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError("a time claim is a number of seconds")
    return datetime.fromtimestamp(value, UTC)


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError("a text claim is a string")
    return value


def _strings(value: object) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ValueError("permissions must be a list of strings")
    return value

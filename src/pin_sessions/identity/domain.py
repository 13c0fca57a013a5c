"""Identity's states and rules (SPEC §3), free of I/O: every decision takes ``now``."""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import math
import secrets
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from pin_sessions.identity.errors import (
    ConfirmationAlreadyUsed,
    ConfirmationAttemptsExceeded,
    ConfirmationExpired,
    IdentityError,
    SessionExpired,
    SessionRevoked,
    TooManySignInRequests,
)

CONFIRMATION_TTL = timedelta(minutes=5)  # INV-S3
MAX_CODE_ATTEMPTS = 5
REFRESH_SESSION_TTL = timedelta(days=30)
CODE_DIGITS = 6
REFRESH_TOKEN_BYTES = 32
MAX_IP_LENGTH = 45


class ConfirmationStatus(StrEnum):
    PENDING = "Pending"
    CONFIRMED = "Confirmed"
    EXPIRED = "Expired"


class SessionStatus(StrEnum):
    ACTIVE = "Active"
    ROTATED = "Rotated"
    REVOKED = "Revoked"
    EXPIRED = "Expired"


class RevokedReason(StrEnum):
    LOGOUT = "Logout"
    REVOKED_BY_USER = "RevokedByUser"
    TOKEN_REUSE = "TokenReuse"  # noqa: S105 - a revoke reason, not a password
    ADMIN = "Admin"


def new_code() -> str:
    """Six digits from the operating system's CSPRNG."""
    return str(secrets.randbelow(10**CODE_DIGITS)).zfill(CODE_DIGITS)


def derived_code(key: bytes, request_id: uuid.UUID) -> str:
    """Six digits fixed by ``key`` and the request: dev codes, readable again without storing."""
    digest = hmac.new(key, request_id.bytes, hashlib.sha256).digest()
    return str(int.from_bytes(digest[:8], "big") % 10**CODE_DIGITS).zfill(CODE_DIGITS)


def code_hash(key: bytes, request_id: uuid.UUID, code: str) -> bytes:
    """HMAC of the code, bound to its request so equal codes of two requests differ."""
    return hmac.new(key, request_id.bytes + code.encode(), hashlib.sha256).digest()


def new_refresh_token() -> str:
    return _b64url(secrets.token_bytes(REFRESH_TOKEN_BYTES))


def successor_token(key: bytes, parent_token: str) -> str:
    """The token that replaces ``parent_token``: the same for every racing refresh of it."""
    return _b64url(hmac.new(key, parent_token.encode(), hashlib.sha256).digest())


def token_hash(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


def _b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


@dataclass(frozen=True)
class ConfirmationState:
    """What a confirm that changed nothing finds in the request's row."""

    status: ConfirmationStatus
    expires_at: datetime
    attempts: int


def confirmation_refusal(state: ConfirmationState, now: datetime) -> IdentityError:
    """Why a request cannot be confirmed at ``now``; expiry first, whatever the status (INV-S3)."""
    if state.expires_at <= now or state.status is ConfirmationStatus.EXPIRED:
        return ConfirmationExpired()
    if state.status is ConfirmationStatus.CONFIRMED:
        return ConfirmationAlreadyUsed()
    # No wait makes this request confirmable again: its attempts are spent for good. What
    # waiting changes is the answer: until the request expires every try is this 429, after
    # it a 410, which tells a client that retries on Retry-After to ask for a new code.
    return ConfirmationAttemptsExceeded(retry_after=whole_seconds(state.expires_at - now))


@dataclass(frozen=True)
class RequestLimit:
    """At most ``count`` sign-in requests within any ``window``."""

    count: int
    window: timedelta


PER_PHONE_LIMIT = RequestLimit(5, timedelta(minutes=15))
PER_ADDRESS_WINDOW = timedelta(hours=1)
SERVICE_WINDOW = timedelta(minutes=1)
# An IPv6 client commonly holds a whole /64: counting single addresses would let it rotate.
IPV6_CLIENT_PREFIX = 64


@dataclass(frozen=True)
class SignInLimits:
    """SPEC §8: per phone (fixed), per client address and service-wide (settings)."""

    per_address: RequestLimit
    service: RequestLimit
    per_phone: RequestLimit = PER_PHONE_LIMIT

    @classmethod
    def of(cls, per_ip_limit: int, global_limit: int) -> SignInLimits:
        return cls(
            RequestLimit(per_ip_limit, PER_ADDRESS_WINDOW),
            RequestLimit(global_limit, SERVICE_WINDOW),
        )


@dataclass(frozen=True)
class LimitEdges:
    """For each limit, when the ``count``-th newest request inside its window was made;
    None while there are fewer. At the limit, that request leaving the window frees a slot."""

    phone: datetime | None
    address: datetime | None
    service: datetime | None


def sign_in_request_refusal(
    edges: LimitEdges, limits: SignInLimits, now: datetime
) -> TooManySignInRequests | None:
    """The 429 for a request that a limit refuses at ``now``; None when every limit allows it.

    Retry-After is the longest of the waits: only after it does every limit allow the
    request (if nobody else asks meanwhile).
    """
    reached = [
        (whole_seconds(edge + limit.window - now), detail)
        for edge, limit, detail in (
            (edges.phone, limits.per_phone, "This phone number asked for too many codes"),
            (edges.address, limits.per_address, "This address asked for too many codes"),
            (edges.service, limits.service, "The service is sending too many codes"),
        )
        if edge is not None
    ]
    if not reached:
        return None
    wait, detail = max(reached)
    return TooManySignInRequests(detail, retry_after=wait)


def ip_network(ip: str | None) -> str | None:
    """What the per-address limit counts by: an IPv4 address, or an IPv6 client's /64."""
    if ip is None:
        return None
    try:
        address = ipaddress.ip_address(ip)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.ip_network(f"{address}/{IPV6_CLIENT_PREFIX}", strict=False))
    return str(address)


def whole_seconds(span: timedelta) -> int:
    """``span`` rounded up to whole seconds, at least 1: waiting that long is enough."""
    return max(1, math.ceil(span.total_seconds()))


@dataclass(frozen=True)
class SessionState:
    """The row a refresh token points at, when it could not simply be rotated."""

    id: uuid.UUID
    user_id: uuid.UUID
    family_id: uuid.UUID
    status: SessionStatus
    expires_at: datetime
    rotated_at: datetime | None
    replaced_by: uuid.UUID | None
    signed_in_at: datetime  # the sign-in that started the family


class RefreshVerdict(StrEnum):
    REPLAY = "replay"  # a racing client: hand out the successor already made
    REUSE = "reuse"  # a stolen or stale token: revoke the family


def refresh_verdict(
    state: SessionState, now: datetime, reuse_interval: timedelta
) -> RefreshVerdict:
    """Decide on a token that is no longer Active and unexpired; raise when it is simply dead."""
    if state.status is SessionStatus.ROTATED:
        assert state.rotated_at is not None
        if now - state.rotated_at <= reuse_interval:
            return RefreshVerdict.REPLAY
        return RefreshVerdict.REUSE
    raise session_refusal(state, now)


def session_refusal(state: SessionState, now: datetime) -> IdentityError:
    """The error for a session that is not Active and unexpired at ``now`` (nor Rotated)."""
    if state.status is SessionStatus.REVOKED:
        return SessionRevoked()
    if state.status is SessionStatus.EXPIRED or state.expires_at <= now:
        return SessionExpired()
    return SessionRevoked("the session was rotated")


def storable_ip(host: str | None) -> str | None:
    """The client address as the varchar(45) columns keep it; a longer one is no IP we can use."""
    return host if host and len(host) <= MAX_IP_LENGTH else None

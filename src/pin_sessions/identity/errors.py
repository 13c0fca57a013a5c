"""Errors of the identity context, each with the stable code of SPEC §4.

Hierarchy::

    AppError (pin_sessions.platform.errors)
    └── IdentityError
        ├── TooManySignInRequests        429 IDENTITY_TOO_MANY_REQUESTS
        ├── CodeDeliveryFailed           503 IDENTITY_CODE_DELIVERY_FAILED
        ├── ConfirmationNotFound         404 IDENTITY_CONFIRMATION_NOT_FOUND
        ├── ConfirmationExpired          410 IDENTITY_CONFIRMATION_EXPIRED
        ├── ConfirmationAlreadyUsed      409 IDENTITY_CONFIRMATION_ALREADY_USED
        ├── InvalidConfirmationCode      400 IDENTITY_CONFIRMATION_INVALID_CODE
        ├── ConfirmationAttemptsExceeded 429 IDENTITY_CONFIRMATION_ATTEMPTS_EXCEEDED
        ├── SessionNotFound              401 IDENTITY_SESSION_NOT_FOUND (refresh)
        │   └── OwnSessionNotFound       404 IDENTITY_SESSION_NOT_FOUND (revoke by id)
        ├── SessionExpired               401 IDENTITY_SESSION_EXPIRED
        ├── SessionRevoked               401 IDENTITY_SESSION_REVOKED
        ├── RefreshTokenReused           401 IDENTITY_REFRESH_TOKEN_REUSED
        ├── UnknownPhoneNumber           (CLI only: no user with that phone number)
        ├── UnknownClient                (CLI only: no service client with that id)
        ├── ClientNotActive              (CLI only: the client is disabled)
        ├── ClientNameTaken              (CLI only: another client has that name)
        ├── UserErased                   404 IDENTITY_USER_NOT_FOUND (an export after erasure)
        └── RecentSignInRequired         401 IDENTITY_RECENT_SIGN_IN_REQUIRED

The OAuth endpoints answer in RFC 6749 §5.2's format instead, which OAuth clients parse
(SPEC §8): ``{"error", "error_description"}``, never problem+json::

    OAuthError
    ├── InvalidRequest        400 invalid_request
    ├── InvalidClient         401 invalid_client (with WWW-Authenticate)
    ├── InvalidScope          400 invalid_scope
    ├── UnsupportedGrantType  400 unsupported_grant_type
    └── TooManyClientFailures 429 temporarily_unavailable (with Retry-After)
"""

from __future__ import annotations

from typing import ClassVar

from pin_sessions.platform.errors import AppError


class IdentityError(AppError):
    """Base of every identity failure."""


class TooManySignInRequests(IdentityError):
    """A limit of SPEC §8 is reached; the detail says which one, ``retry_after`` when it frees."""

    code = "IDENTITY_TOO_MANY_REQUESTS"
    status = 429
    title = "Too many sign-in requests"
    advice = (
        "Too many codes were asked for this phone, from this address, or by everyone at once. "
        "Wait the Retry-After seconds before asking again."
    )


class CodeDeliveryFailed(IdentityError):
    """The SMS gateway did not take the code; the request was withdrawn, so asking again is free."""

    code = "IDENTITY_CODE_DELIVERY_FAILED"
    status = 503
    title = "The sign-in code could not be sent"
    advice = (
        "The SMS could not be sent; nothing was counted against the phone's limit. Ask for a "
        "code again in a moment."
    )


class ConfirmationNotFound(IdentityError):
    code = "IDENTITY_CONFIRMATION_NOT_FOUND"
    status = 404
    title = "No such sign-in request"
    advice = (
        "No sign-in request has this requestId. Ask for a new code with POST "
        "/api/identity/sign-in/requests."
    )


class ConfirmationExpired(IdentityError):
    code = "IDENTITY_CONFIRMATION_EXPIRED"
    status = 410
    title = "The sign-in request has expired"
    advice = "A code is valid for 5 minutes and this one's time is over. Ask for a new code."


class ConfirmationAlreadyUsed(IdentityError):
    code = "IDENTITY_CONFIRMATION_ALREADY_USED"
    status = 409
    title = "The sign-in request has already been confirmed"
    advice = (
        "This sign-in request was already confirmed; a code signs in once. Ask for a new code "
        "to sign in again."
    )


class InvalidConfirmationCode(IdentityError):
    code = "IDENTITY_CONFIRMATION_INVALID_CODE"
    status = 400
    title = "The code is wrong"
    advice = (
        "The code does not match. Check the SMS and try again; after 5 wrong codes the "
        "request is closed."
    )


class ConfirmationAttemptsExceeded(IdentityError):
    code = "IDENTITY_CONFIRMATION_ATTEMPTS_EXCEEDED"
    status = 429
    title = "Too many wrong codes for this sign-in request"
    advice = "5 wrong codes were sent for this request, which is now closed. Ask for a new code."


class SessionNotFound(IdentityError):
    code = "IDENTITY_SESSION_NOT_FOUND"
    status = 401
    title = "No such session"
    advice = (
        "No session matches this refresh token (or, when revoking by id, none of your Active "
        "sessions has this id). Sign in again."
    )


class OwnSessionNotFound(SessionNotFound):
    """A signed-in user named a session that is not one of their Active ones."""

    status = 404


class SessionExpired(IdentityError):
    code = "IDENTITY_SESSION_EXPIRED"
    status = 401
    title = "The session has expired"
    advice = "The session's 30 days are over. Sign in again."


class SessionRevoked(IdentityError):
    code = "IDENTITY_SESSION_REVOKED"
    status = 401
    title = "The session has been revoked"
    advice = "The session was signed out or revoked. Sign in again."


class RefreshTokenReused(IdentityError):
    code = "IDENTITY_REFRESH_TOKEN_REUSED"
    status = 401
    title = "The refresh token was used again; every session of its family is revoked"
    advice = (
        "An already used refresh token was presented again, so every session of its family "
        "was revoked to protect the account. Sign in again, and keep only the newest refresh "
        "token."
    )


class UnknownPhoneNumber(IdentityError):
    code = "IDENTITY_USER_NOT_FOUND"
    status = 404
    title = "No user has this phone number"
    advice = "No such user: no account has this phone number, or the account was erased."


class UnknownClient(IdentityError):
    code = "IDENTITY_CLIENT_NOT_FOUND"
    status = 404
    title = "No service client has this id"
    advice = "No service client has this id; list them with pin-sessions clients list."


class ClientNotActive(IdentityError):
    code = "IDENTITY_CLIENT_DISABLED"
    status = 409
    title = "The service client is disabled"
    advice = "The service client is disabled; an operator registers a new one or uses another."


class ClientNameTaken(IdentityError):
    code = "IDENTITY_CLIENT_NAME_TAKEN"
    status = 409
    title = "Another service client has this name"
    advice = "Client names are unique: choose another name, or use the existing client."


class OAuthError(Exception):
    """An RFC 6749 §5.2 error: its ``error`` code, status and a description for people."""

    error: ClassVar[str] = "invalid_request"
    status: ClassVar[int] = 400

    def __init__(self, description: str) -> None:
        super().__init__(description)
        self.description = description


class InvalidRequest(OAuthError):
    error = "invalid_request"


class InvalidClient(OAuthError):
    error = "invalid_client"
    status = 401


class InvalidScope(OAuthError):
    error = "invalid_scope"


class UnsupportedGrantType(OAuthError):
    error = "unsupported_grant_type"


class TooManyClientFailures(OAuthError):
    """SPEC §11: too many failed client authentications for this client id or address.

    RFC 6749 has no error for a rate limit; ``temporarily_unavailable`` (its §4.1.2.1) says
    "ask again later", which is what ``Retry-After`` says too. ``invalid_client`` would be
    false: the credentials were not judged, and a right secret is refused alike.
    """

    error = "temporarily_unavailable"
    status = 429

    def __init__(self, retry_after: int) -> None:
        super().__init__(f"too many failed client authentications; retry in {retry_after} s")
        self.retry_after = retry_after


class UserErased(IdentityError):
    """The caller's account has been erased: nothing is left to export (SPEC §10)."""

    code = "IDENTITY_USER_NOT_FOUND"
    status = 404
    title = "This user has been erased"


class RecentSignInRequired(IdentityError):
    """Erasing an account asks for an access token issued within the last 10 minutes."""

    code = "IDENTITY_RECENT_SIGN_IN_REQUIRED"
    status = 401
    title = "Sign in again to do this"
    advice = (
        "This needs an access token issued in the last 10 minutes. Sign in again, then repeat "
        "the request."
    )

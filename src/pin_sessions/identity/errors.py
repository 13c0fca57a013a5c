"""Errors of the identity context, each with the stable code of SPEC §4.

Hierarchy::

    AppError (pin_sessions.platform.errors)
    └── IdentityError
        ├── TooManySignInRequests        429 IDENTITY_TOO_MANY_REQUESTS
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
        ├── UserErased                   404 IDENTITY_USER_NOT_FOUND (an export after erasure)
        └── RecentSignInRequired         401 IDENTITY_RECENT_SIGN_IN_REQUIRED
"""

from __future__ import annotations

from pin_sessions.platform.errors import AppError


class IdentityError(AppError):
    """Base of every identity failure."""


class TooManySignInRequests(IdentityError):
    code = "IDENTITY_TOO_MANY_REQUESTS"
    status = 429
    title = "Too many sign-in requests for this phone number"


class ConfirmationNotFound(IdentityError):
    code = "IDENTITY_CONFIRMATION_NOT_FOUND"
    status = 404
    title = "No such sign-in request"


class ConfirmationExpired(IdentityError):
    code = "IDENTITY_CONFIRMATION_EXPIRED"
    status = 410
    title = "The sign-in request has expired"


class ConfirmationAlreadyUsed(IdentityError):
    code = "IDENTITY_CONFIRMATION_ALREADY_USED"
    status = 409
    title = "The sign-in request has already been confirmed"


class InvalidConfirmationCode(IdentityError):
    code = "IDENTITY_CONFIRMATION_INVALID_CODE"
    status = 400
    title = "The code is wrong"


class ConfirmationAttemptsExceeded(IdentityError):
    code = "IDENTITY_CONFIRMATION_ATTEMPTS_EXCEEDED"
    status = 429
    title = "Too many wrong codes for this sign-in request"


class SessionNotFound(IdentityError):
    code = "IDENTITY_SESSION_NOT_FOUND"
    status = 401
    title = "No such session"


class OwnSessionNotFound(SessionNotFound):
    """A signed-in user named a session that is not one of their Active ones."""

    status = 404


class SessionExpired(IdentityError):
    code = "IDENTITY_SESSION_EXPIRED"
    status = 401
    title = "The session has expired"


class SessionRevoked(IdentityError):
    code = "IDENTITY_SESSION_REVOKED"
    status = 401
    title = "The session has been revoked"


class RefreshTokenReused(IdentityError):
    code = "IDENTITY_REFRESH_TOKEN_REUSED"
    status = 401
    title = "The refresh token was used again; every session of its family is revoked"


class UnknownPhoneNumber(IdentityError):
    code = "IDENTITY_USER_NOT_FOUND"
    status = 404
    title = "No user has this phone number"


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

"""The refusals of bearer authentication (SPEC §4), apart from the :mod:`auth` that raises
most of them: a use case that refuses a session no longer active (identity's refresh and
sign-out, user-activity's erasure checks) raises them too, in processes that never import
the HTTP stack (a job, a consumer: its import is a third of their start)."""

from __future__ import annotations

from pin_sessions.platform.errors import Forbidden, Unauthorized


class AuthenticationRequired(Unauthorized):
    code = "AUTH_REQUIRED"
    title = "Authentication required"
    advice = "Send Authorization: Bearer <access token>, or X-Anonymous-Id where a guest may call."


class SessionNotActive(Unauthorized):
    code = "AUTH_SESSION_NOT_ACTIVE"
    title = "The session of this token is no longer active"
    advice = (
        "The token's session was signed out, revoked or expired (or the user erased). Sign in "
        "again."
    )


class ClientDisabled(Unauthorized):
    """An m2m token of a client an operator disabled: refused within 30 s of the change."""

    code = "AUTH_CLIENT_DISABLED"
    title = "The client of this token is disabled"
    advice = (
        "The service client of this token has been disabled by an operator. Ask them to "
        "enable it or to register a new client."
    )


class UserTokenRequired(Unauthorized):
    """An m2m token where a user acts: no user is authenticated, hence 401 (SPEC §4)."""

    code = "AUTH_USER_TOKEN_REQUIRED"
    title = "A user's access token is required"
    advice = "A user acts here: send a user's access token, not a service's."


class WrongTokenKind(Forbidden):
    """A user's token on an internal API: authenticated, but not as a service."""

    code = "AUTH_WRONG_TOKEN_KIND"
    title = "This kind of token is not accepted here"
    advice = "This internal route takes a service's token (POST /oauth/token), not a user's."


class MissingScope(Forbidden):
    code = "AUTH_MISSING_SCOPE"
    title = "The token lacks the required scope"
    advice = (
        "The service's token lacks the scope this route needs; request a token with it (the "
        "client must be allowed that scope)."
    )


class MissingPermission(Forbidden):
    code = "AUTH_MISSING_PERMISSION"
    title = "The user lacks the required permission"
    advice = (
        "The user lacks the permission this route needs; an operator grants it (pin-sessions "
        "users grant)."
    )

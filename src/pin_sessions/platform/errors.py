"""The error base every context derives from.

Hierarchy::

    AppError                    code, HTTP status, title
    ├── platform errors below   (NOT_FOUND, VALIDATION_ERROR, ...)
    ├── identity errors         (pin_sessions.identity.errors)
    ├── user-activity errors    (pin_sessions.user_activity.errors)
    └── dev-stats errors        (pin_sessions.dev_stats.errors)

One HTTP handler (``pin_sessions.platform.http.problems``) renders any of them as
RFC 9457 problem+json with the extra ``code`` member.
"""

from __future__ import annotations

from typing import Any, ClassVar


class AppError(Exception):
    """A failure the caller can act on: a stable ``code`` and an HTTP status."""

    code: ClassVar[str] = "INTERNAL_ERROR"
    status: ClassVar[int] = 500
    title: ClassVar[str] = "Internal error"
    advice: ClassVar[str] = (
        "The service failed unexpectedly; nothing was changed. Retry once; if it happens "
        "again, report the response's requestId."
    )

    def __init__(
        self, detail: str | None = None, *, retry_after: int | None = None, **extra: Any
    ) -> None:
        super().__init__(detail or self.title)
        self.detail = detail or self.title
        # Whole seconds before asking again is worth it; sent as ``Retry-After`` (RFC 9110).
        self.retry_after = retry_after
        self.extra = extra


class NotFound(AppError):
    code = "NOT_FOUND"
    status = 404
    title = "Not found"
    advice = "No route or resource has this path. Check the path against the API reference (/docs)."


class MethodNotAllowed(AppError):
    code = "METHOD_NOT_ALLOWED"
    status = 405
    title = "Method not allowed"
    advice = (
        "This path exists but not for this method; the Allow header lists the methods it serves."
    )


class ValidationFailed(AppError):
    code = "VALIDATION_ERROR"
    status = 422
    title = "Request validation failed"
    advice = (
        "The body or a parameter is not what the operation expects; `errors` names each field "
        "and what it expects. Fix them and send again; unknown fields are refused too."
    )


class MalformedRequest(AppError):
    code = "MALFORMED_REQUEST"
    status = 400
    title = "Malformed request"
    advice = (
        "The request could not be read (the body is not valid JSON, or the request is "
        "broken). Send well-formed JSON with Content-Type: application/json."
    )


class PayloadTooLarge(AppError):
    code = "PAYLOAD_TOO_LARGE"
    status = 413
    title = "Request body too large"
    advice = (
        "The body is larger than the service accepts (64 KiB). Send less data, e.g. a smaller "
        "`data` object."
    )


class Unauthorized(AppError):
    code = "UNAUTHORIZED"
    status = 401
    title = "Authentication required"
    advice = "Send valid credentials: Authorization: Bearer <access token>."


class Forbidden(AppError):
    code = "FORBIDDEN"
    status = 403
    title = "Not allowed"
    advice = "The credentials are valid but do not allow this operation."


class ServiceUnavailable(AppError):
    code = "SERVICE_UNAVAILABLE"
    status = 503
    title = "Service unavailable"
    advice = (
        "The service could not answer in time (the database was slow or unreachable, or the "
        "process is at its limit of requests). Nothing was changed; retry after the "
        "Retry-After seconds, with backoff."
    )


class UniqueViolation(AppError):
    """A unique constraint refused a write; ``constraint`` names it."""

    code = "CONFLICT"
    status = 409
    title = "Conflict"
    advice = (
        "The request conflicts with the current state of the resource. Read it again and retry."
    )

    def __init__(self, constraint: str | None, detail: str | None = None) -> None:
        super().__init__(detail)
        self.constraint = constraint

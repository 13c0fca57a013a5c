"""The errors of the user-activity context.

Hierarchy::

    AppError (pin_sessions.platform.errors)
    └── UserActivityError
        ├── CursorInvalid            400 USER_ACTIVITY_CURSOR_INVALID
        ├── LimitInvalid             400 USER_ACTIVITY_LIMIT_INVALID
        ├── ViewNotFound             404 USER_ACTIVITY_VIEW_NOT_FOUND
        ├── IdempotencyKeyReused     422 USER_ACTIVITY_IDEMPOTENCY_KEY_REUSED
        ├── DeviceNotFound           404 USER_ACTIVITY_DEVICE_NOT_FOUND
        ├── SessionAlreadyEnded      409 USER_ACTIVITY_SESSION_ALREADY_ENDED
        └── UserErased               404 USER_ACTIVITY_USER_NOT_FOUND (export after erasure)

The ``X-Anonymous-Id`` errors (USER_ACTIVITY_ANONYMOUS_ID_INVALID / _REQUIRED) belong to the
header, which identity reads too: they live with it in ``platform.http.anonymous_id``; a
malformed ``Idempotency-Key`` (USER_ACTIVITY_IDEMPOTENCY_KEY_INVALID) with its header in
``platform.http.idempotency_key``.
"""

from __future__ import annotations

from pin_sessions.platform.errors import AppError


class UserActivityError(AppError):
    """Base of every user-activity failure."""


class CursorInvalid(UserActivityError):
    code = "USER_ACTIVITY_CURSOR_INVALID"
    status = 400
    title = "The cursor is not valid"
    advice = (
        "The cursor is not one this API returned. Send the previous page's nextCursor as it "
        "is, or omit it for the first page."
    )


class LimitInvalid(UserActivityError):
    code = "USER_ACTIVITY_LIMIT_INVALID"
    status = 400
    title = "The page size is not valid"
    advice = "limit must be a whole number from 1 to 100."


class ViewNotFound(UserActivityError):
    code = "USER_ACTIVITY_VIEW_NOT_FOUND"
    status = 404
    title = "No such property view on this device"
    advice = (
        "This device has no property view with this id. End views with the X-Anonymous-Id "
        "that started them."
    )


class IdempotencyKeyReused(UserActivityError):
    code = "USER_ACTIVITY_IDEMPOTENCY_KEY_REUSED"
    status = 422
    title = "This Idempotency-Key was used for another request"
    advice = (
        "This Idempotency-Key was already used by this device for a different request. Use a "
        "new key for each new request; reuse a key only to retry the same request."
    )


class DeviceNotFound(UserActivityError):
    code = "USER_ACTIVITY_DEVICE_NOT_FOUND"
    status = 404
    title = "No session is known for this device"
    advice = "The service has never seen a session of this anonymousId."


class SessionAlreadyEnded(UserActivityError):
    """INV-SES-006: an Inactive session never changes again.

    Raised by the domain on any change asked of an Inactive session. A route that meets it
    because the closer won a race starts the device's next session instead (INV-SES-003);
    one that cannot answers it.
    """

    code = "USER_ACTIVITY_SESSION_ALREADY_ENDED"
    status = 409
    title = "This session has ended; a new one starts with the device's next activity"
    advice = (
        "The session ended (by inactivity, or another user's sign-in on the device) and never "
        "changes again. Repeat the request: it acts on the device's next session."
    )


class UserErased(UserActivityError):
    code = "USER_ACTIVITY_USER_NOT_FOUND"
    status = 404
    title = "This user has been erased"
    advice = "This user has been erased; nothing is left to export."

"""``X-Anonymous-Id``, the device header identity and user-activity both read (SPEC §4, §8).

One rule, one parser and one pair of errors for both: a device id is a UUID other than
the nil UUID, which no device is ever issued and which every buggy client would share.
Routes declare ``OptionalDevice`` or ``RequiredDevice``; the header is read by hand, so a
missing or bad one is a 400 with its stable code, never FastAPI's 422 (and, read as one
value, its surrounding whitespace is trimmed and a second one is a 400: ``headers``).
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any

from fastapi import Depends, Request

from pin_sessions.platform.errors import AppError
from pin_sessions.platform.http.headers import single_header

ANONYMOUS_ID_HEADER = "X-Anonymous-Id"
NIL_UUID = uuid.UUID(int=0)


class AnonymousIdInvalid(AppError):
    code = "USER_ACTIVITY_ANONYMOUS_ID_INVALID"
    status = 400
    title = "The AnonymousId must be a UUID other than the nil UUID"
    advice = (
        "X-Anonymous-Id must be a UUID (not the nil UUID). Send the anonymousId the service "
        "issued to this device at its first start."
    )


class AnonymousIdRequired(AppError):
    code = "USER_ACTIVITY_ANONYMOUS_ID_REQUIRED"
    status = 400
    title = "X-Anonymous-Id is required"
    advice = (
        "This operation acts on a device: send X-Anonymous-Id, the anonymousId issued by POST "
        "/api/user-activity/sessions/start."
    )


def parse_anonymous_id(text: str) -> uuid.UUID | None:
    """The device id ``text`` names; None when it is not a UUID or is the nil UUID."""
    try:
        anonymous_id = uuid.UUID(text)
    except ValueError:
        return None
    return None if anonymous_id == NIL_UUID else anonymous_id


def device_id(text: str, *, where: str = ANONYMOUS_ID_HEADER) -> uuid.UUID:
    """The device ``text`` names; a malformed or nil UUID is a 400 naming ``where``."""
    anonymous_id = parse_anonymous_id(text)
    if anonymous_id is None:
        raise AnonymousIdInvalid(f"{where} must be a UUID other than the nil UUID")
    return anonymous_id


# Dependencies are coroutines: FastAPI would run a plain function in a worker thread.
async def optional_device(request: Request) -> uuid.UUID | None:
    """The caller's device, when it named one (once: a second header is a 400)."""
    text = single_header(request, ANONYMOUS_ID_HEADER)
    return None if text is None else device_id(text)


async def required_device(request: Request) -> uuid.UUID:
    """The caller's device; a request without the header is a 400."""
    anonymous_id = await optional_device(request)
    if anonymous_id is None:
        raise AnonymousIdRequired()
    return anonymous_id


OptionalDevice = Annotated[uuid.UUID | None, Depends(optional_device)]
RequiredDevice = Annotated[uuid.UUID, Depends(required_device)]


def anonymous_id_parameter(*, required: bool) -> dict[str, Any]:
    """The header's OpenAPI parameter; read by hand, so a bad one is a 400, never a 422."""
    return {
        "name": ANONYMOUS_ID_HEADER,
        "in": "header",
        "required": required,
        "description": "The device's AnonymousId: a UUID, not the nil UUID",
        "schema": {"type": "string", "format": "uuid", "not": {"const": str(NIL_UUID)}},
    }

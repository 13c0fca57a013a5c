"""``X-Anonymous-Id``, the device header identity and user-activity both read (SPEC §4, §8).

One rule for both: a device id is a UUID other than the nil UUID, which no device is ever
issued and which every buggy client would share. Each context raises its own error
(code ``USER_ACTIVITY_ANONYMOUS_ID_INVALID``) when :func:`parse_anonymous_id` refuses.
"""

from __future__ import annotations

import uuid
from typing import Any

ANONYMOUS_ID_HEADER = "X-Anonymous-Id"
NIL_UUID = uuid.UUID(int=0)


def parse_anonymous_id(text: str) -> uuid.UUID | None:
    """The device id ``text`` names; None when it is not a UUID or is the nil UUID."""
    try:
        anonymous_id = uuid.UUID(text)
    except ValueError:
        return None
    return None if anonymous_id == NIL_UUID else anonymous_id


def anonymous_id_parameter(*, required: bool) -> dict[str, Any]:
    """The header's OpenAPI parameter; read by hand, so a bad one is a 400, never a 422."""
    return {
        "name": ANONYMOUS_ID_HEADER,
        "in": "header",
        "required": required,
        "description": "The device's AnonymousId: a UUID, not the nil UUID",
        "schema": {"type": "string", "format": "uuid", "not": {"const": str(NIL_UUID)}},
    }

"""``Idempotency-Key`` (IETF httpapi draft "The Idempotency-Key HTTP Header Field"), SPEC §8.

The header's rule lives here, once: 1 to 64 printable ASCII characters. Leading and
trailing spaces are not part of a header value on the wire (they are trimmed, as for every
header read as one value: ``headers``), so a key neither starts nor ends with one; the
header given twice is a 400 ``DUPLICATE_HEADER``. Routes declare ``IdempotencyKey``; a bad
value is a 400 with a stable code. What a key means — a repeat records nothing new and gets
the first answer — is the route's context's business (``user_activity.idempotency``).
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from fastapi import Depends, Request

from pin_sessions.platform.errors import AppError
from pin_sessions.platform.http.headers import single_header

IDEMPOTENCY_KEY_HEADER = "Idempotency-Key"
MAX_KEY_LENGTH = 64
KEY_PATTERN = r"^[\x21-\x7e]([\x20-\x7e]{0,62}[\x21-\x7e])?$"
_KEY = re.compile(KEY_PATTERN)


class IdempotencyKeyInvalid(AppError):
    code = "USER_ACTIVITY_IDEMPOTENCY_KEY_INVALID"
    status = 400
    title = "Idempotency-Key must be 1 to 64 printable ASCII characters"
    advice = "Idempotency-Key must be 1 to 64 printable ASCII characters, e.g. a random UUID."


async def idempotency_key(request: Request) -> str | None:
    """The caller's key, when it sent one."""
    text = single_header(request, IDEMPOTENCY_KEY_HEADER)
    if text is None:
        return None
    if not _KEY.fullmatch(text):
        raise IdempotencyKeyInvalid()
    return text


IdempotencyKey = Annotated[str | None, Depends(idempotency_key)]


RECORD_ONCE = (
    "1 to 64 printable ASCII characters; a repeat with the same key from the same "
    "device within 24 hours records nothing new and gets the first answer"
)


def idempotency_key_parameter(description: str = RECORD_ONCE) -> dict[str, Any]:
    """The header's OpenAPI parameter; read by hand, so a bad one is a 400, never a 422."""
    return {
        "name": IDEMPOTENCY_KEY_HEADER,
        "in": "header",
        "required": False,
        "description": description,
        "schema": {
            "type": "string",
            "minLength": 1,
            "maxLength": MAX_KEY_LENGTH,
            "pattern": KEY_PATTERN,
        },
    }

"""What a refused request is told: each field, and in words what it expects.

A validation problem (422 ``VALIDATION_ERROR``) carries ``errors: [{field, message}]``:
``field`` is the member's name as the request spells it (``phoneNumber``, ``data.items``, a
query parameter's or a header's name), ``message`` a sentence a developer can act on. The
input itself is never echoed: it may be a phone number or a code.

A field constrained by a pattern says what the pattern means (``pattern_check``) instead of
quoting the regular expression.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import AfterValidator, Field
from pydantic_core import PydanticCustomError

_SOURCES = {"body", "query", "path", "header", "cookie"}
_UUID_EXAMPLE = "0b7f8c3e-6a52-4c1e-9d1a-5f0c2a7e4b11"


def pattern_check(pattern: str, expected: str) -> AfterValidator:
    """A string constraint whose refusal says ``must be <expected>``."""
    compiled = re.compile(pattern)

    def check(value: str) -> str:
        if compiled.fullmatch(value) is None:
            raise PydanticCustomError(
                "string_pattern_mismatch", "must be {expected}", {"expected": expected}
            )
        return value

    return AfterValidator(check)


def documented_pattern(pattern: str) -> Any:
    """The pattern in the field's JSON schema, where ``pattern_check`` enforces it."""
    return Field(json_schema_extra={"pattern": pattern})


def field_errors(errors: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
    """Pydantic's errors as ``[{field, message}]``."""
    return [{"field": _field(error.get("loc", ())), "message": _message(error)} for error in errors]


def _field(loc: Sequence[str | int]) -> str:
    parts = [str(part) for part in loc]
    if len(parts) > 1 and parts[0] in _SOURCES:
        parts = parts[1:]
    return ".".join(parts) or "body"


_IN_WORDS = {
    "missing": "is required",
    "extra_forbidden": "is not a field of this request (unknown fields are refused)",
    "string_type": "must be a string",
    "int_type": "must be a whole number",
    "int_parsing": "must be a whole number",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "uuid_type": f"must be a UUID, such as {_UUID_EXAMPLE}",
    "uuid_parsing": f"must be a UUID, such as {_UUID_EXAMPLE}",
    "model_type": "must be a JSON object",
    "model_attributes_type": "must be a JSON object",
    "dict_type": "must be a JSON object",
    "list_type": "must be a JSON array",
    "date_parsing": "must be a date, YYYY-MM-DD",
    "date_from_datetime_parsing": "must be a date, YYYY-MM-DD",
}


def _message(error: Mapping[str, Any]) -> str:
    kind, ctx = error.get("type", ""), error.get("ctx") or {}
    if kind == "string_too_short":
        return f"must be at least {ctx.get('min_length')} characters long"
    if kind == "string_too_long":
        return f"must be at most {ctx.get('max_length')} characters long"
    if kind in _IN_WORDS:
        return _IN_WORDS[kind]
    message = str(error.get("msg", "is not valid"))
    # Pydantic words a validator's ValueError as "Value error, <what it said>".
    return message.removeprefix("Value error, ")

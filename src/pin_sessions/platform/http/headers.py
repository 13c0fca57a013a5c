"""Request headers the API reads as one value (SPEC §11): given once, OWS trimmed.

``X-Anonymous-Id``, ``Idempotency-Key`` and ``Authorization`` each name one thing. Sent
twice, they are ambiguous — a proxy may keep either, or join them with a comma (RFC 9110
§5.3) — so a second one is a 400 ``DUPLICATE_HEADER``, never the first silently winning.
A field value's leading and trailing spaces and tabs are not part of it (RFC 9110 §5.5,
OWS); not every HTTP parser drops them, so they are dropped here. Each header's own rule
stays with its owner (``anonymous_id``, ``idempotency_key``, ``platform.auth``), which
reads it through :func:`single_header`.
"""

from __future__ import annotations

from starlette.requests import Request

from pin_sessions.platform.errors import AppError

# RFC 9110 §5.6.3: optional whitespace is spaces and horizontal tabs, nothing else.
OWS = " \t"


class DuplicateHeader(AppError):
    """A header the API reads as one value came more than once; ``header`` names it."""

    code = "DUPLICATE_HEADER"
    status = 400
    title = "A header that takes one value was given more than once"
    advice = (
        "A header that takes one value (X-Anonymous-Id, Idempotency-Key, Authorization, "
        "Content-Type) was sent more than once. Send it once."
    )


def single_header(request: Request, name: str) -> str | None:
    """The value of ``name`` without its surrounding OWS; None when absent.

    Given more than once, :class:`DuplicateHeader`.
    """
    values = request.headers.getlist(name)
    if not values:
        return None
    if len(values) > 1:
        raise DuplicateHeader(f"{name} must be given at most once", header=name)
    return values[0].strip(OWS)

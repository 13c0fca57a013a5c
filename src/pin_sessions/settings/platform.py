"""The platform's groups: database, HTTP, Kafka, consumers, relay, and the log format."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import BeforeValidator, Field, SecretStr, model_validator
from pydantic_settings import NoDecode

from pin_sessions.settings.base import (
    BatchSize,
    Group,
    NonNegativeDuration,
    PositiveDuration,
    SettingRuleError,
)

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
# Bind addresses that mean "every interface": no client reaches the service by them.
_WILDCARD_HOSTS = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}  # noqa: S104


def _database_url(value: Any) -> Any:
    """A PostgreSQL URL, or None for an empty value (a deployment that passes the variable
    through whether or not it has a value)."""
    text = value.get_secret_value() if isinstance(value, SecretStr) else value
    if not isinstance(text, str):
        return value
    if not text.strip():
        return None
    # Only the scheme is named: the rest may hold a password.
    if urlsplit(text.strip()).scheme not in ("postgresql", "postgres"):
        raise ValueError("must be a postgresql:// URL")
    return SecretStr(text.strip())


class ConsumersSettings(Group):
    """``PIN_CONSUMERS__*``: the batches of every event consumer (``pin-sessions consume``)."""

    # Messages one pass reads: the PostgreSQL bus's statement, or one Kafka poll.
    batch_size: BatchSize = 200
    # Outbox rows the PostgreSQL bus deletes per statement once every consumer passed them.
    prune_batch_size: BatchSize = 1000
    # Rows of an erased user deleted or cleared per transaction (SPEC §10), so a heavy
    # user's erasure never holds many row locks for long.
    erasure_batch_size: BatchSize = 1000


class RelaySettings(Group):
    """``PIN_RELAY__*``: the outbox relay's batches (``pin-sessions relay``)."""

    # Outbox rows read and sent to Kafka per pass.
    batch_size: BatchSize = 500
    # Sent rows deleted per statement.
    prune_batch_size: BatchSize = 1000


class DatabaseSettings(Group):
    """SPEC §9: the bounds of every database call the API makes (jobs keep their own budgets)."""

    statement_timeout: PositiveDuration = timedelta(seconds=5)
    acquire_timeout: PositiveDuration = timedelta(seconds=2)
    pool_max: Annotated[int, Field(gt=0)] = 10
    # The pool of a job, relay or consumer process (each uses one or two connections at a
    # time; `up`'s workers share one pool of twice this).
    worker_pool_max: Annotated[int, Field(gt=0)] = 4
    # How long opening a connection may take, for every pool: a host that drops packets
    # would otherwise hold a new connection for asyncpg's 60 s.
    connect_timeout: PositiveDuration = timedelta(seconds=10)
    # SPEC §11: a streaming replica of PIN_DATABASE_URL for the API's reads that tolerate lag
    # (session history, the dev-stats summary); unset, they run on the primary.
    read_url: Annotated[SecretStr | None, BeforeValidator(_database_url)] = None
    # A replica further behind the primary than this is skipped until it catches up.
    read_max_lag: PositiveDuration = timedelta(seconds=10)


_ORIGIN = re.compile(r"^https?://[^/?#\s]+$")


def _origin_list(value: Any) -> Any:
    """``PIN_HTTP__CORS_ORIGINS``: comma-separated or a JSON list of origins.

    An origin is what a browser sends in ``Origin``: scheme, host and port, no path and no
    trailing slash, so a typo fails at start instead of never matching.
    """
    if isinstance(value, str):
        text = value.strip()
        value = json.loads(text) if text.startswith("[") else text.split(",")
    if not isinstance(value, (list, tuple)):
        return value
    origins = []
    for item in value:
        origin = item.strip() if isinstance(item, str) else item
        if origin == "":
            continue
        if not isinstance(origin, str) or not _ORIGIN.match(origin):
            raise ValueError(f"{origin!r} is not an origin such as https://app.example:8443")
        origins.append(origin)
    return tuple(origins)


def listening_url(host: str, port: int) -> str:
    """The base URL a person on this machine reaches ``host:port`` by.

    A wildcard bind (``0.0.0.0``, ``::``) is reached on the loopback address; an IPv6
    literal is bracketed.
    """
    reachable = _WILDCARD_HOSTS.get(host, host)
    if ":" in reachable:
        reachable = f"[{reachable}]"
    return f"http://{reachable}:{port}"


def is_wildcard_host(host: str) -> bool:
    """Whether binding ``host`` listens on every interface."""
    return host in _WILDCARD_HOSTS


class HttpSettings(Group):
    # SPEC §11: where the API listens (`serve` and `up`); their --host and --port, when
    # given, win over these for that process.
    host: Annotated[str, Field(min_length=1)] = DEFAULT_HOST
    port: Annotated[int, Field(ge=0, le=65535)] = DEFAULT_PORT
    max_body_bytes: Annotated[int, Field(gt=0)] = 64 * 1024
    # SPEC §8: the browser origins allowed to call /api/** and /.well-known/**; empty is
    # same origin only.
    cors_origins: Annotated[tuple[str, ...], NoDecode, BeforeValidator(_origin_list)] = ()
    # After SIGTERM the API keeps serving this long, /readyz already 503, so a load
    # balancer stops sending before the listener closes (0: close at once).
    shutdown_delay: NonNegativeDuration = timedelta(0)
    # Then requests in flight get this long to finish before their connections are cut.
    shutdown_timeout: PositiveDuration = timedelta(seconds=3)
    # SPEC §11: a request (headers and body) must arrive within this of the server's
    # starting to wait for it, or its connection is closed: idle and trickling clients
    # would otherwise hold a file descriptor each for ever.
    read_timeout: PositiveDuration = timedelta(seconds=30)
    # Requests one API process serves at once (each of `serve --workers N`); past it a
    # request is answered 503 with Retry-After before any work (platform/http/admission.py).
    # Enough for 3,000 heartbeats/s answered within 65 ms; more in flight than that is a
    # process past its latency budget, where waiting longer helps no client.
    max_concurrent_requests: Annotated[int, Field(gt=0)] = 200
    # SPEC §11: /docs and /openapi.json; None (unset) serves them outside prod only.
    docs: bool | None = None


class KafkaSettings(Group):
    """``PIN_KAFKA__*``: how the relay and the consumers reach a managed broker (TLS, SASL).

    The broker list itself is ``PIN_KAFKA_BOOTSTRAP_SERVERS`` (SPEC §2). Each value maps to
    the librdkafka property of the same name (``security.protocol``, ``sasl.mechanism``, ...).
    """

    security_protocol: Literal["plaintext", "ssl", "sasl_plaintext", "sasl_ssl"] = "plaintext"
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] | None = None
    sasl_username: str | None = None
    sasl_password: SecretStr | None = None
    # PEM files; unset, TLS trusts the system's certificate authorities.
    ssl_ca_location: Path | None = None
    ssl_certificate_location: Path | None = None
    ssl_key_location: Path | None = None
    ssl_key_password: SecretStr | None = None
    # Whether the broker's certificate must name the host connected to.
    ssl_endpoint_identification: bool = True
    # Replicas of every topic the service creates (SPEC §11: 1 on one broker, 3 in prod).
    # Unset: 3, or every broker of a Kafka with fewer (a laptop's one broker), so a
    # production cluster gets 3 without a setting and a one-broker Kafka still works. Set, it
    # is kept: a cluster too small for it stops the relay with a line naming it.
    replication_factor: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _consistent(self) -> KafkaSettings:
        sasl = self.security_protocol.startswith("sasl_")
        tls = self.security_protocol.endswith("ssl")
        if sasl:
            for name in ("sasl_mechanism", "sasl_username", "sasl_password"):
                if getattr(self, name) is None:
                    raise SettingRuleError(
                        name,
                        f"is required when PIN_KAFKA__SECURITY_PROTOCOL={self.security_protocol}",
                    )
        else:
            for name in ("sasl_mechanism", "sasl_username", "sasl_password"):
                if getattr(self, name) is not None:
                    raise SettingRuleError(name, "needs a sasl_* PIN_KAFKA__SECURITY_PROTOCOL")
        for name in ("ssl_ca_location", "ssl_certificate_location", "ssl_key_location"):
            path: Path | None = getattr(self, name)
            if path is None:
                continue
            if not tls:
                raise SettingRuleError(name, "needs an ssl PIN_KAFKA__SECURITY_PROTOCOL")
            if not path.is_file():
                raise SettingRuleError(name, f"names no readable file: {path}")
        if (self.ssl_certificate_location is None) != (self.ssl_key_location is None):
            raise SettingRuleError(
                "ssl_key_location", "and PIN_KAFKA__SSL_CERTIFICATE_LOCATION go together"
            )
        return self

    def librdkafka_options(self) -> dict[str, str]:
        """The librdkafka properties every client of ours is given besides its own."""
        options: dict[str, str] = {"security.protocol": self.security_protocol}
        if self.sasl_mechanism is not None:
            options["sasl.mechanism"] = self.sasl_mechanism
        if self.sasl_username is not None:
            options["sasl.username"] = self.sasl_username
        if self.sasl_password is not None:
            options["sasl.password"] = self.sasl_password.get_secret_value()
        for name in ("ssl_ca_location", "ssl_certificate_location", "ssl_key_location"):
            path = getattr(self, name)
            if path is not None:
                options[name.replace("_", ".")] = str(path)
        if self.ssl_key_password is not None:
            options["ssl.key.password"] = self.ssl_key_password.get_secret_value()
        if self.security_protocol.endswith("ssl"):
            options["ssl.endpoint.identification.algorithm"] = (
                "https" if self.ssl_endpoint_identification else "none"
            )
        return options


class LogFormat(StrEnum):
    """``auto``: readable console lines on a terminal, JSON lines anywhere else."""

    AUTO = "auto"
    CONSOLE = "console"
    JSON = "json"

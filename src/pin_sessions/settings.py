"""The one typed settings object of the service (SPEC §2).

Values come from ``PIN_*`` environment variables, nested groups with ``__``
(``PIN_EXPIRE_SESSIONS__BATCH_SIZE``). Durations accept seconds or ISO-8601
(``PT5M``). :func:`load_settings` is the one way in: the command line passes it the
process environment, tests an explicit mapping, and both take the same path —
pydantic-settings' reading of environment variables, given the mapping instead of
``os.environ``. Nothing here reads the environment itself.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from datetime import timedelta
from enum import StrEnum
from ipaddress import IPv4Network, IPv6Network, ip_network
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

import pydantic_settings
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

ENV_PREFIX = "PIN_"
NESTED_DELIMITER = "__"
# Bytes: what the keys derived from it carry (256 bits); prod refuses less (SPEC §11).
RECOMMENDED_SECRET_KEY_LENGTH = 32
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
# What an unset PIN_PUBLIC_URL means for a process on the default address.
DEFAULT_PUBLIC_URL = f"http://{DEFAULT_HOST}:{DEFAULT_PORT}"
# Bind addresses that mean "every interface": no client reaches the service by them.
_WILDCARD_HOSTS = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}  # noqa: S104
# SPEC §8: how long anyone may cache the JWKS (its Cache-Control max-age).
JWKS_MAX_AGE = timedelta(minutes=5)


def _seconds_or_iso(value: Any) -> Any:
    """Accept plain seconds (``"300"``, ``"0.5"``) besides pydantic's ISO-8601 parsing."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        if not text.upper().startswith("P"):
            raise ValueError("must be seconds or an ISO-8601 duration such as PT5M") from None
        return value
    # float() also reads "inf" and "nan"; and past timedelta's range it raises OverflowError,
    # which pydantic lets escape as a traceback instead of naming the variable.
    if not math.isfinite(seconds):
        raise ValueError("must be a finite number of seconds")
    try:
        return timedelta(seconds=seconds)
    except OverflowError:
        raise ValueError("is too long for a duration") from None


def _positive(value: timedelta) -> timedelta:
    if value <= timedelta(0):
        raise ValueError("must be > 0 seconds")
    return value


def _not_negative(value: timedelta) -> timedelta:
    if value < timedelta(0):
        raise ValueError("must be >= 0 seconds")
    return value


Duration = Annotated[timedelta, BeforeValidator(_seconds_or_iso)]
PositiveDuration = Annotated[Duration, AfterValidator(_positive)]
BatchSize = Annotated[int, Field(gt=0)]


class Environment(StrEnum):
    DEV = "dev"
    PROD = "prod"


class _Group(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class PollingSettings(_Group):
    """What the job runner reads from every job's group: its cadence."""

    polling_interval: PositiveDuration


class JobSettings(PollingSettings):
    """A batch job's group: its cadence, batch and run budget.

    ``max_run_duration`` is a guard, not a deadline: it is read between batches, and
    what a run leaves is the next tick's.
    """

    batch_size: BatchSize
    max_run_duration: PositiveDuration


class ExpireSessionsSettings(JobSettings):
    """Seed 000 ``ExpireSessionsOptions``."""

    polling_interval: PositiveDuration = timedelta(minutes=5)
    batch_size: BatchSize = 5000
    max_run_duration: PositiveDuration = timedelta(minutes=2)
    # How long a phase's UPDATE waits for a row lock held elsewhere before the phase is
    # reported failed (the next tick retries); keeps a stuck lock from stalling the run.
    lock_timeout: PositiveDuration = timedelta(seconds=5)


class SessionRetentionSettings(JobSettings):
    # Retention is not urgent: an hourly pass keeps each run's work small.
    polling_interval: PositiveDuration = timedelta(hours=1)
    batch_size: BatchSize = 5000
    max_run_duration: PositiveDuration = timedelta(minutes=2)
    sicr_age: PositiveDuration = timedelta(days=30)
    refresh_age: PositiveDuration = timedelta(days=90)


class ActivityCloserSettings(JobSettings):
    inactivity_threshold: PositiveDuration = timedelta(minutes=15)
    polling_interval: PositiveDuration = timedelta(seconds=60)
    batch_size: BatchSize = 500
    max_run_duration: PositiveDuration = timedelta(minutes=2)


class ActivityRetentionSettings(JobSettings):
    # The seed's cadence: once a day.
    polling_interval: PositiveDuration = timedelta(days=1)
    batch_size: BatchSize = 1000
    max_run_duration: PositiveDuration = timedelta(minutes=10)
    age: PositiveDuration = timedelta(days=365)


def _above_jwks_max_age(value: timedelta) -> timedelta:
    """A key published no longer than a verifier may cache the JWKS could sign unseen."""
    if value <= JWKS_MAX_AGE:
        seconds = int(JWKS_MAX_AGE.total_seconds())
        raise ValueError(f"must be above {seconds} seconds, the JWKS cache age")
    return value


class SigningKeysSettings(PollingSettings):
    """SPEC §8: when the signing-keys job creates the next key and when that key signs."""

    # Each pass is a few rows; a key waiting to sign is promoted within one interval.
    polling_interval: PositiveDuration = timedelta(minutes=5)
    rotate_after: PositiveDuration = timedelta(days=30)
    # Above the JWKS document's max-age, so every verifier has the key before it signs.
    publish_ahead: Annotated[Duration, AfterValidator(_above_jwks_max_age)] = timedelta(hours=1)


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


class ConsumersSettings(_Group):
    """``PIN_CONSUMERS__*``: the batches of every event consumer (``pin-sessions consume``)."""

    # Messages one pass reads: the PostgreSQL bus's statement, or one Kafka poll.
    batch_size: BatchSize = 200
    # Outbox rows the PostgreSQL bus deletes per statement once every consumer passed them.
    prune_batch_size: BatchSize = 1000
    # Rows of an erased user deleted or cleared per transaction (SPEC §10), so a heavy
    # user's erasure never holds many row locks for long.
    erasure_batch_size: BatchSize = 1000


class RelaySettings(_Group):
    """``PIN_RELAY__*``: the outbox relay's batches (``pin-sessions relay``)."""

    # Outbox rows read and sent to Kafka per pass.
    batch_size: BatchSize = 500
    # Sent rows deleted per statement.
    prune_batch_size: BatchSize = 1000


class DatabaseSettings(_Group):
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


class HttpSettings(_Group):
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
    shutdown_delay: Annotated[Duration, AfterValidator(_not_negative)] = timedelta(0)
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


class KafkaSettings(_Group):
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
                    raise _SettingError(
                        name,
                        f"is required when PIN_KAFKA__SECURITY_PROTOCOL={self.security_protocol}",
                    )
        else:
            for name in ("sasl_mechanism", "sasl_username", "sasl_password"):
                if getattr(self, name) is not None:
                    raise _SettingError(name, "needs a sasl_* PIN_KAFKA__SECURITY_PROTOCOL")
        for name in ("ssl_ca_location", "ssl_certificate_location", "ssl_key_location"):
            path: Path | None = getattr(self, name)
            if path is None:
                continue
            if not tls:
                raise _SettingError(name, "needs an ssl PIN_KAFKA__SECURITY_PROTOCOL")
            if not path.is_file():
                raise _SettingError(name, f"names no readable file: {path}")
        if (self.ssl_certificate_location is None) != (self.ssl_key_location is None):
            raise _SettingError(
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


IpNetwork = IPv4Network | IPv6Network


def _public_url(value: str) -> str:
    """``PIN_PUBLIC_URL``: an http(s) origin with an optional path, kept without a final slash."""
    parsed = urlsplit(value.strip())
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise ValueError("must be an http:// or https:// URL such as https://sessions.example.com")
    if parsed.query or parsed.fragment:
        raise ValueError("must not have a query or a fragment")
    return value.strip().rstrip("/")


def _network_list(value: Any) -> Any:
    """``PIN_TRUSTED_PROXIES``: comma-separated or a JSON list of IPs and CIDRs.

    A bare address is its own /32 (or /128); host bits in a CIDR are tolerated.
    """
    if isinstance(value, str):
        text = value.strip()
        value = (
            json.loads(text) if text.startswith("[") else [p for p in text.split(",") if p.strip()]
        )
    if not isinstance(value, (list, tuple)):
        return value
    networks = []
    for item in value:
        if not isinstance(item, str):
            networks.append(item)
            continue
        try:
            networks.append(ip_network(item.strip(), strict=False))
        except ValueError:
            raise ValueError(f"{item.strip()!r} is not an IP address or CIDR network") from None
    return networks


class SmsProvider(StrEnum):
    LOG = "log"
    WEBHOOK = "webhook"
    TWILIO = "twilio"
    SMSRU = "smsru"


CODE_PLACEHOLDER = "{code}"
# A host name as WebOTP's `@host #code` line carries it: labels of letters, digits, hyphens.
_HOST_NAME = re.compile(
    r"^(?=.{1,253}$)[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$",
    re.IGNORECASE,
)


def _has_code_placeholder(template: str) -> str:
    if CODE_PLACEHOLDER not in template:
        raise ValueError(f"must contain {CODE_PLACEHOLDER}")
    return template


def _host_name(value: str) -> str:
    if not _HOST_NAME.match(value):
        raise ValueError("must be a host name such as example.com (no scheme, port or path)")
    return value.lower()


def _http_url(value: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("must be an http:// or https:// URL")
    return value.rstrip("/")


HttpUrl = Annotated[str, AfterValidator(_http_url)]


class SmsSettings(_Group):
    """SPEC §8 SMS delivery: which gateway sends the sign-in code, and what it says.

    Each gateway's credentials are required when it is the chosen one; the base URLs
    default to the providers' public APIs.
    """

    provider: SmsProvider = SmsProvider.LOG
    template: Annotated[str, AfterValidator(_has_code_placeholder)] = (
        "Your PIN sign-in code: {code}"
    )
    # When set, the WebOTP line `@domain #code` ends the message, so browsers offer the code.
    webotp_domain: Annotated[str, AfterValidator(_host_name)] | None = None
    # Bounds one attempt as a whole, from connecting to the last byte of the answer.
    timeout: PositiveDuration = timedelta(seconds=5)
    webhook_url: HttpUrl | None = None
    webhook_secret: SecretStr | None = None
    twilio_account_sid: str | None = None
    twilio_auth_token: SecretStr | None = None
    twilio_from: str | None = None
    twilio_base_url: HttpUrl = "https://api.twilio.com"
    smsru_api_id: SecretStr | None = None
    smsru_base_url: HttpUrl = "https://sms.ru"

    @model_validator(mode="after")
    def _the_provider_has_its_credentials(self) -> SmsSettings:
        required = {
            SmsProvider.WEBHOOK: ("webhook_url", "webhook_secret"),
            SmsProvider.TWILIO: ("twilio_account_sid", "twilio_auth_token", "twilio_from"),
            SmsProvider.SMSRU: ("smsru_api_id",),
        }
        for name in required.get(self.provider, ()):
            value = getattr(self, name)
            text = value.get_secret_value() if isinstance(value, SecretStr) else value
            if not text:
                raise _SettingError(name, f"is required when PIN_SMS__PROVIDER={self.provider}")
        return self


class SignInSettings(_Group):
    """SPEC §8 abuse limits on sign-in requests, besides the fixed 5 per phone per 15 min."""

    # Requests per client address (an IPv6 client's /64) per hour.
    per_ip_limit: Annotated[int, Field(gt=0)] = 20
    # Requests per minute for the whole service, every instance together.
    global_limit: Annotated[int, Field(gt=0)] = 600


class OAuthSettings(_Group):
    """SPEC §11: failed client authentications at /oauth/token and /oauth/introspect."""

    # Failures per minute per client id, and per client address (an IPv6 client's /64),
    # counted in PostgreSQL across every instance; past it, 429 with Retry-After.
    failure_limit: Annotated[int, Field(gt=0)] = 10


class Settings(BaseSettings):
    """Everything the processes read from their environment."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter=NESTED_DELIMITER,
        frozen=True,
        extra="ignore",
    )

    database_url: SecretStr | None = None
    data_dir: Path = Path(".pin")
    kafka_bootstrap_servers: str | None = None
    secret_key: SecretStr | None = None
    # The former name of secret_key, still read (with a warning at start) when it is unset.
    jwt_secret: SecretStr | None = None
    # The issuer of every token (SPEC §3) and the base of the OAuth metadata's URLs; unset,
    # the address the API listens on (see effective_public_url).
    public_url: Annotated[str, AfterValidator(_public_url)] | None = None
    m2m_token_ttl: PositiveDuration = timedelta(minutes=15)
    env: Environment = Environment.DEV
    refresh_reuse_interval: Annotated[Duration, AfterValidator(_not_negative)] = timedelta(
        seconds=10
    )
    # None when PIN_DEV_CODES is unset: off, except that `up` turns it on outside prod.
    dev_codes: bool | None = None
    metrics_port: Annotated[int, Field(ge=0, le=65535)] | None = None
    log_level: str = "info"
    log_format: LogFormat = LogFormat.AUTO
    # Peers whose X-Forwarded-For is believed; from anyone else it is ignored.
    trusted_proxies: Annotated[tuple[IpNetwork, ...], NoDecode, BeforeValidator(_network_list)] = ()

    expire_sessions: ExpireSessionsSettings = ExpireSessionsSettings()
    session_retention: SessionRetentionSettings = SessionRetentionSettings()
    activity_closer: ActivityCloserSettings = ActivityCloserSettings()
    activity_retention: ActivityRetentionSettings = ActivityRetentionSettings()
    signing_keys: SigningKeysSettings = SigningKeysSettings()
    database: DatabaseSettings = DatabaseSettings()
    http: HttpSettings = HttpSettings()
    sms: SmsSettings = SmsSettings()
    sign_in: SignInSettings = SignInSettings()
    oauth: OAuthSettings = OAuthSettings()
    kafka: KafkaSettings = KafkaSettings()
    consumers: ConsumersSettings = ConsumersSettings()
    relay: RelaySettings = RelaySettings()

    @property
    def effective_public_url(self) -> str:
        """``PIN_PUBLIC_URL``, else the API's own address (SPEC §11).

        ``serve`` and ``up`` put the address they really bound into ``http`` before they
        build anything, so an unset ``PIN_PUBLIC_URL`` follows it, port 0 included.
        """
        return self.public_url or listening_url(self.http.host, self.http.port)

    def listening_on(self, host: str, port: int) -> Settings:
        """These settings as a process that listens on ``host:port`` sees them."""
        return self.model_copy(
            update={"http": self.http.model_copy(update={"host": host, "port": port})}
        )

    @property
    def master_secret(self) -> SecretStr | None:
        """``PIN_SECRET_KEY``, else the deprecated ``PIN_JWT_SECRET``; None: generate one (dev)."""
        return self.secret_key or self.jwt_secret

    @property
    def reads_deprecated_secret_name(self) -> bool:
        """``PIN_JWT_SECRET`` is set: it still works, and the start says it is deprecated."""
        return self.jwt_secret is not None

    @property
    def secret_key_is_short(self) -> bool:
        """A configured secret under 32 bytes: less than the 256 bits the derived keys have."""
        secret = self.master_secret
        return secret is not None and _byte_length(secret) < RECOMMENDED_SECRET_KEY_LENGTH

    @property
    def serves_docs(self) -> bool:
        """``/docs`` and ``/openapi.json``: ``PIN_HTTP__DOCS`` when set, else outside prod only."""
        return self.http.docs if self.http.docs is not None else self.env is not Environment.PROD

    @property
    def serves_metrics_on_api_port(self) -> bool:
        """``/metrics`` beside the API outside prod; in prod only on the metrics port (SPEC §11)."""
        return self.env is not Environment.PROD

    @model_validator(mode="after")
    def _prod_refuses_dev_defaults(self) -> Settings:
        if self.env is Environment.PROD:
            if self.master_secret is None or not self.master_secret.get_secret_value():
                raise _SettingError("secret_key", "is required when PIN_ENV=prod")
            if self.secret_key_is_short:
                # Named as it was given: the deprecated name is still read.
                name = "secret_key" if self.secret_key else "jwt_secret"
                raise _SettingError(
                    name,
                    f"must be at least {RECOMMENDED_SECRET_KEY_LENGTH} bytes when PIN_ENV=prod "
                    "(e.g. openssl rand -hex 32)",
                )
            if self.database_url is None:
                raise _SettingError(
                    "database_url", "is required when PIN_ENV=prod (no embedded PostgreSQL)"
                )
            if self.dev_codes:
                raise _SettingError("dev_codes", "is refused when PIN_ENV=prod")
        return self

    def check_api_can_sign_in(self) -> None:
        """Refuse, in a process about to serve the API, what would let nobody sign in.

        Only the API sends codes, so this is no rule of every role: a job, the relay or a
        consumer starts in prod without an SMS gateway, and its credentials need not reach
        them.
        """
        if self.env is Environment.PROD and self.sms.provider is SmsProvider.LOG:
            raise SettingsError(
                f"{_env_name(('sms', 'provider'))} must name an SMS gateway (webhook, twilio "
                "or smsru) when PIN_ENV=prod; log sends nothing"
            )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Only what load_settings read from its mapping: never os.environ behind its back.
        return (init_settings,)


def _byte_length(secret: SecretStr) -> int:
    return len(secret.get_secret_value().encode("utf-8", "surrogatepass"))


class _EnvironSource(EnvSettingsSource):
    """pydantic-settings' environment source over a given mapping instead of ``os.environ``."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self._environ = environ
        super().__init__(Settings)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        # Variable names are case-insensitive, as pydantic-settings reads the environment.
        return {key.lower(): value for key, value in self._environ.items()}


class _SettingError(ValueError):
    """A cross-field rule broken by one variable; carries the field it names."""

    def __init__(self, field: str, rule: str) -> None:
        super().__init__(rule)
        self.field = field
        self.rule = rule


class SettingsError(Exception):
    """Settings could not be loaded; ``str()`` is one line per broken rule."""


def load_settings(environ: Mapping[str, str]) -> Settings:
    """Build settings from the ``PIN_*`` variables of ``environ``; other variables are ignored."""
    try:
        return Settings(**_EnvironSource(environ)())
    except pydantic_settings.SettingsError as exc:
        # A group given whole as JSON that does not parse, e.g. PIN_HTTP='{'.
        field = re.search(r'field "(\w+)"', str(exc))
        name = _env_name((field.group(1),)) if field else "a PIN_ variable"
        raise SettingsError(f"{name} must be valid JSON") from None
    except ValidationError as exc:
        raise SettingsError("\n".join(_describe(error) for error in exc.errors())) from exc


_RULES = {
    "greater_than": "must be > {gt}",
    "greater_than_equal": "must be >= {ge}",
    "less_than": "must be < {lt}",
    "less_than_equal": "must be <= {le}",
    "enum": "must be one of {expected}",
}


def _describe(error: Mapping[str, Any]) -> str:
    loc = tuple(str(part) for part in error["loc"])
    ctx = error.get("ctx") or {}
    if isinstance(ctx.get("error"), _SettingError):
        # Raised by the model at ``loc`` (empty at the top), about a field inside it.
        setting_error: _SettingError = ctx["error"]
        return f"{_env_name((*loc, setting_error.field))} {setting_error.rule}"
    if isinstance(ctx.get("error"), ValueError):
        return f"{_env_name(loc)} {ctx['error']}"
    template = _RULES.get(error["type"])
    rule = template.format(**ctx) if template else _lower_first(error["msg"])
    return f"{_env_name(loc)} {rule}"


def _env_name(loc: tuple[str, ...]) -> str:
    return ENV_PREFIX + NESTED_DELIMITER.join(part.upper() for part in loc)


def _lower_first(text: str) -> str:
    return text[:1].lower() + text[1:]

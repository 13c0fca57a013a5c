"""The root settings object, and :func:`load_settings`, the one way in."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import timedelta
from enum import StrEnum
from ipaddress import IPv4Network, IPv6Network, ip_network
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlsplit

import pydantic_settings
from pydantic import (
    AfterValidator,
    BeforeValidator,
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

from pin_sessions.settings.base import (
    ENV_PREFIX,
    NESTED_DELIMITER,
    NonNegativeDuration,
    PositiveDuration,
    SettingRuleError,
    SettingsError,
    env_name,
)
from pin_sessions.settings.identity import (
    ExpireSessionsSettings,
    OAuthSettings,
    SessionRetentionSettings,
    SigningKeysSettings,
    SignInSettings,
    SmsProvider,
    SmsSettings,
)
from pin_sessions.settings.platform import (
    DEFAULT_HOST,
    DEFAULT_PORT,
    ConsumersSettings,
    DatabaseSettings,
    HttpSettings,
    KafkaSettings,
    LogFormat,
    RelaySettings,
    listening_url,
)
from pin_sessions.settings.user_activity import (
    ActivityCloserSettings,
    ActivityRetentionSettings,
    HeartbeatSettings,
)

# Bytes: what the keys derived from it carry (256 bits); prod refuses less (SPEC §11).
RECOMMENDED_SECRET_KEY_LENGTH = 32
# What an unset PIN_PUBLIC_URL means for a process on the default address.
DEFAULT_PUBLIC_URL = f"http://{DEFAULT_HOST}:{DEFAULT_PORT}"


class Environment(StrEnum):
    DEV = "dev"
    PROD = "prod"


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
    refresh_reuse_interval: NonNegativeDuration = timedelta(seconds=10)
    # None when PIN_DEV_CODES is unset: off, except that `up` turns it on outside prod.
    dev_codes: bool | None = None
    metrics_port: Annotated[int, Field(ge=0, le=65535)] | None = None
    log_level: str = "info"
    log_format: LogFormat = LogFormat.AUTO
    # Peers whose X-Forwarded-For is believed; from anyone else it is ignored.
    trusted_proxies: Annotated[tuple[IpNetwork, ...], NoDecode, BeforeValidator(_network_list)] = ()

    expire_sessions: ExpireSessionsSettings = ExpireSessionsSettings()
    session_retention: SessionRetentionSettings = SessionRetentionSettings()
    heartbeat: HeartbeatSettings = HeartbeatSettings()
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
                raise SettingRuleError("secret_key", "is required when PIN_ENV=prod")
            if self.secret_key_is_short:
                # Named as it was given: the deprecated name is still read.
                name = "secret_key" if self.secret_key else "jwt_secret"
                raise SettingRuleError(
                    name,
                    f"must be at least {RECOMMENDED_SECRET_KEY_LENGTH} bytes when PIN_ENV=prod "
                    "(e.g. openssl rand -hex 32)",
                )
            if self.database_url is None:
                raise SettingRuleError(
                    "database_url", "is required when PIN_ENV=prod (no embedded PostgreSQL)"
                )
            if self.dev_codes:
                raise SettingRuleError("dev_codes", "is refused when PIN_ENV=prod")
        return self

    def check_api_can_sign_in(self) -> None:
        """Refuse, in a process about to serve the API, what would let nobody sign in.

        Only the API sends codes, so this is no rule of every role: a job, the relay or a
        consumer starts in prod without an SMS gateway, and its credentials need not reach
        them.
        """
        if self.env is Environment.PROD and self.sms.provider is SmsProvider.LOG:
            raise SettingsError(
                f"{env_name(('sms', 'provider'))} must name an SMS gateway (webhook, twilio "
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


def load_settings(environ: Mapping[str, str]) -> Settings:
    """Build settings from the ``PIN_*`` variables of ``environ``; other variables are ignored."""
    try:
        return Settings(**_EnvironSource(environ)())
    except pydantic_settings.SettingsError as exc:
        # A group given whole as JSON that does not parse, e.g. PIN_HTTP='{'.
        field = re.search(r'field "(\w+)"', str(exc))
        name = env_name((field.group(1),)) if field else "a PIN_ variable"
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
    if isinstance(ctx.get("error"), SettingRuleError):
        # Raised by the model at ``loc`` (empty at the top), about a field inside it.
        setting_error: SettingRuleError = ctx["error"]
        return f"{env_name((*loc, setting_error.field))} {setting_error.rule}"
    if isinstance(ctx.get("error"), ValueError):
        return f"{env_name(loc)} {ctx['error']}"
    template = _RULES.get(error["type"])
    rule = template.format(**ctx) if template else _lower_first(error["msg"])
    return f"{env_name(loc)} {rule}"


def _lower_first(text: str) -> str:
    return text[:1].lower() + text[1:]

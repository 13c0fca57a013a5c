"""The one typed settings object of the service (SPEC §2).

Values come from ``PIN_*`` environment variables, nested groups with ``__``
(``PIN_EXPIRE_SESSIONS__BATCH_SIZE``). Durations accept seconds or ISO-8601
(``PT5M``). :func:`load_settings` is the one way in: the command line passes it the
process environment, tests an explicit mapping, and both take the same path —
pydantic-settings' reading of environment variables, given the mapping instead of
``os.environ``. Nothing here reads the environment itself.

One module per owner: ``identity`` (sign-in, SMS, OAuth, its jobs), ``user_activity`` (its
jobs), ``platform`` (database, HTTP, Kafka, consumers, relay, log format), and ``root``: the
:class:`Settings` that holds them all, with :func:`load_settings`. What they share (durations,
the group model, naming a variable in an error) is ``base``.
"""

from pin_sessions.settings.base import (
    ENV_PREFIX,
    NESTED_DELIMITER,
    BatchSize,
    Duration,
    JobSettings,
    NonNegativeDuration,
    PollingSettings,
    PositiveDuration,
    SettingsError,
)
from pin_sessions.settings.identity import (
    CODE_PLACEHOLDER,
    JWKS_MAX_AGE,
    ExpireSessionsSettings,
    HttpUrl,
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
    is_wildcard_host,
    listening_url,
)
from pin_sessions.settings.root import (
    DEFAULT_PUBLIC_URL,
    RECOMMENDED_SECRET_KEY_LENGTH,
    Environment,
    IpNetwork,
    Settings,
    load_settings,
)
from pin_sessions.settings.user_activity import (
    ActivityCloserSettings,
    ActivityRetentionSettings,
    HeartbeatSettings,
)

__all__ = [
    "CODE_PLACEHOLDER",
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "DEFAULT_PUBLIC_URL",
    "ENV_PREFIX",
    "JWKS_MAX_AGE",
    "NESTED_DELIMITER",
    "RECOMMENDED_SECRET_KEY_LENGTH",
    "ActivityCloserSettings",
    "ActivityRetentionSettings",
    "BatchSize",
    "ConsumersSettings",
    "DatabaseSettings",
    "Duration",
    "Environment",
    "ExpireSessionsSettings",
    "HeartbeatSettings",
    "HttpSettings",
    "HttpUrl",
    "IpNetwork",
    "JobSettings",
    "KafkaSettings",
    "LogFormat",
    "NonNegativeDuration",
    "OAuthSettings",
    "PollingSettings",
    "PositiveDuration",
    "RelaySettings",
    "SessionRetentionSettings",
    "Settings",
    "SettingsError",
    "SignInSettings",
    "SigningKeysSettings",
    "SmsProvider",
    "SmsSettings",
    "is_wildcard_host",
    "listening_url",
    "load_settings",
]

"""Identity's groups: sign-in limits, SMS delivery, OAuth client failures, and its jobs
(expire-sessions, session-retention, signing-keys)."""

from __future__ import annotations

import re
from datetime import timedelta
from enum import StrEnum
from typing import Annotated
from urllib.parse import urlsplit

from pydantic import AfterValidator, Field, SecretStr, model_validator

from pin_sessions.settings.base import (
    BatchSize,
    Duration,
    Group,
    JobSettings,
    PollingSettings,
    PositiveDuration,
    SettingRuleError,
)

# SPEC §8: how long anyone may cache the JWKS (its Cache-Control max-age).
JWKS_MAX_AGE = timedelta(minutes=5)


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


class SmsSettings(Group):
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
                raise SettingRuleError(name, f"is required when PIN_SMS__PROVIDER={self.provider}")
        return self


class SignInSettings(Group):
    """SPEC §8 abuse limits on sign-in requests, besides the fixed 5 per phone per 15 min."""

    # Requests per client address (an IPv6 client's /64) per hour.
    per_ip_limit: Annotated[int, Field(gt=0)] = 20
    # Requests per minute for the whole service, every instance together.
    global_limit: Annotated[int, Field(gt=0)] = 600


class OAuthSettings(Group):
    """SPEC §11: failed client authentications at /oauth/token and /oauth/introspect."""

    # Failures per minute per client id, and per client address (an IPv6 client's /64),
    # counted in PostgreSQL across every instance; past it, 429 with Retry-After.
    failure_limit: Annotated[int, Field(gt=0)] = 10

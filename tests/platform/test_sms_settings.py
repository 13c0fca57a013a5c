"""SPEC §8's SMS and sign-in-limit settings: their defaults, and the process that refuses to
start, with one line naming the variable, when they cannot work."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest

from pin_sessions.settings import SettingsError, SmsProvider, load_settings
from tests.conftest import TEST_SECRET_KEY
from tests.support.cli import run_cli
from tests.support.processes import pin_sessions
from tests.support.sms_gateways import CONFIGURED_GATEWAY

TWILIO = {
    "PIN_SMS__PROVIDER": "twilio",
    "PIN_SMS__TWILIO_ACCOUNT_SID": "AC123",
    "PIN_SMS__TWILIO_AUTH_TOKEN": "token",
    "PIN_SMS__TWILIO_FROM": "+15005550006",
}
PROD = {
    "PIN_ENV": "prod",
    "PIN_SECRET_KEY": TEST_SECRET_KEY,
    "PIN_DATABASE_URL": "postgresql://db/pin",
}


def test_defaults_follow_the_spec() -> None:
    settings = load_settings({})
    assert settings.sms.provider is SmsProvider.LOG
    assert settings.sms.timeout == timedelta(seconds=5)
    assert "{code}" in settings.sms.template
    assert settings.sms.webotp_domain is None
    assert settings.sms.twilio_base_url == "https://api.twilio.com"
    assert settings.sms.smsru_base_url == "https://sms.ru"
    assert (settings.sign_in.per_ip_limit, settings.sign_in.global_limit) == (20, 600)


def test_each_gateway_loads_with_its_credentials() -> None:
    assert load_settings(CONFIGURED_GATEWAY).sms.provider is SmsProvider.WEBHOOK
    assert load_settings(TWILIO).sms.twilio_from == "+15005550006"
    smsru = load_settings({"PIN_SMS__PROVIDER": "smsru", "PIN_SMS__SMSRU_API_ID": "key"})
    assert smsru.sms.smsru_api_id is not None
    assert load_settings({**PROD, **CONFIGURED_GATEWAY}).sms.provider is SmsProvider.WEBHOOK


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"PIN_SMS__TEMPLATE": "Your code"}, "PIN_SMS__TEMPLATE must contain {code}"),
        (
            {"PIN_SMS__PROVIDER": "carrier-pigeon"},
            "PIN_SMS__PROVIDER must be one of 'log', 'webhook', 'twilio' or 'smsru'",
        ),
        (
            {"PIN_SMS__PROVIDER": "webhook", "PIN_SMS__WEBHOOK_SECRET": "s"},
            "PIN_SMS__WEBHOOK_URL is required when PIN_SMS__PROVIDER=webhook",
        ),
        (
            {"PIN_SMS__PROVIDER": "webhook", "PIN_SMS__WEBHOOK_URL": "https://gw/sms"},
            "PIN_SMS__WEBHOOK_SECRET is required when PIN_SMS__PROVIDER=webhook",
        ),
        (
            {**CONFIGURED_GATEWAY, "PIN_SMS__WEBHOOK_URL": "gw.internal/sms"},
            "PIN_SMS__WEBHOOK_URL must be an http:// or https:// URL",
        ),
        (
            {**TWILIO, "PIN_SMS__TWILIO_AUTH_TOKEN": ""},
            "PIN_SMS__TWILIO_AUTH_TOKEN is required when PIN_SMS__PROVIDER=twilio",
        ),
        (
            {key: value for key, value in TWILIO.items() if key != "PIN_SMS__TWILIO_FROM"},
            "PIN_SMS__TWILIO_FROM is required when PIN_SMS__PROVIDER=twilio",
        ),
        (
            {"PIN_SMS__PROVIDER": "smsru"},
            "PIN_SMS__SMSRU_API_ID is required when PIN_SMS__PROVIDER=smsru",
        ),
        (
            {"PIN_SMS__WEBOTP_DOMAIN": "https://pin.example.com"},
            "PIN_SMS__WEBOTP_DOMAIN must be a host name",
        ),
        ({"PIN_SMS__TIMEOUT": "0"}, "PIN_SMS__TIMEOUT must be > 0 seconds"),
        ({"PIN_SIGN_IN__PER_IP_LIMIT": "0"}, "PIN_SIGN_IN__PER_IP_LIMIT must be > 0"),
        ({"PIN_SIGN_IN__GLOBAL_LIMIT": "-1"}, "PIN_SIGN_IN__GLOBAL_LIMIT must be > 0"),
    ],
)
def test_a_setting_that_cannot_work_is_named_with_its_rule(
    environ: dict[str, str], message: str
) -> None:
    with pytest.raises(SettingsError) as refused:
        load_settings(environ)
    assert str(refused.value).startswith(message)
    assert "\n" not in str(refused.value)


NO_GATEWAY_IN_PROD = (
    "PIN_SMS__PROVIDER must name an SMS gateway (webhook, twilio or smsru) when "
    "PIN_ENV=prod; log sends nothing"
)


@pytest.mark.parametrize(
    ("environ", "line"),
    [
        ({"PIN_SMS__TEMPLATE": "no code here"}, "PIN_SMS__TEMPLATE must contain {code}"),
        (
            {"PIN_SMS__PROVIDER": "sms-gun"},
            "PIN_SMS__PROVIDER must be one of 'log', 'webhook', 'twilio' or 'smsru'",
        ),
        (
            {"PIN_SMS__PROVIDER": "smsru"},
            "PIN_SMS__SMSRU_API_ID is required when PIN_SMS__PROVIDER=smsru",
        ),
        (PROD, NO_GATEWAY_IN_PROD),
        ({**PROD, "PIN_SMS__PROVIDER": "log"}, NO_GATEWAY_IN_PROD),
    ],
)
def test_the_server_refuses_to_start_with_one_line_and_exit_2(
    environ: dict[str, str], line: str, tmp_path: Path
) -> None:
    ran = run_cli("serve", env={**environ, "PIN_DATA_DIR": str(tmp_path)})
    assert ran.returncode == 2
    assert ran.stderr.strip() == line


def test_up_in_prod_refuses_the_log_provider_too(tmp_path: Path) -> None:
    ran = run_cli("up", env={**PROD, "PIN_DATA_DIR": str(tmp_path)})
    assert (ran.returncode, ran.stderr.strip()) == (2, NO_GATEWAY_IN_PROD)


def test_roles_that_send_no_code_start_in_prod_without_a_gateway(
    database_url: str, tmp_path: Path
) -> None:
    """Only the API sends codes: a job in prod needs neither a gateway nor its credentials."""
    env = {**PROD, "PIN_DATABASE_URL": database_url, "PIN_DATA_DIR": str(tmp_path)}
    assert load_settings(env).sms.provider is SmsProvider.LOG
    process = pin_sessions("job", "expire-sessions", "--once", env=env)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    assert isinstance(json.loads(out), dict)

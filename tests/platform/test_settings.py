from __future__ import annotations

from datetime import timedelta

import pytest

from pin_sessions.settings import Environment, Settings, SettingsError, load_settings
from tests.support.sms_gateways import CONFIGURED_GATEWAY


def test_defaults_follow_the_spec() -> None:
    settings = load_settings({})
    assert settings.env is Environment.DEV
    assert settings.database_url is None
    assert str(settings.data_dir) == ".pin"
    assert settings.refresh_reuse_interval == timedelta(seconds=10)
    assert settings.dev_codes is None  # unset: off, except that `up` turns it on
    assert settings.expire_sessions.polling_interval == timedelta(minutes=5)
    assert settings.expire_sessions.batch_size == 5000
    assert settings.expire_sessions.max_run_duration == timedelta(minutes=2)
    assert settings.session_retention.sicr_age == timedelta(days=30)
    assert settings.session_retention.refresh_age == timedelta(days=90)
    assert settings.activity_closer.inactivity_threshold == timedelta(minutes=15)
    assert settings.activity_closer.polling_interval == timedelta(seconds=60)
    assert settings.activity_closer.batch_size == 500
    assert settings.activity_retention.age == timedelta(days=365)
    assert settings.http.read_timeout == timedelta(seconds=30)
    assert load_settings({"PIN_HTTP__READ_TIMEOUT": "PT2M"}).http.read_timeout == timedelta(
        minutes=2
    )


JOB_GROUPS = ("EXPIRE_SESSIONS", "SESSION_RETENTION", "ACTIVITY_CLOSER", "ACTIVITY_RETENTION")


def test_every_job_has_its_cadence_batch_size_and_run_budget_with_the_old_defaults() -> None:
    settings = load_settings({})
    jobs = (
        settings.expire_sessions,
        settings.session_retention,
        settings.activity_closer,
        settings.activity_retention,
    )
    assert [(job.polling_interval, job.batch_size, job.max_run_duration) for job in jobs] == [
        (timedelta(minutes=5), 5000, timedelta(minutes=2)),
        (timedelta(hours=1), 5000, timedelta(minutes=2)),
        (timedelta(seconds=60), 500, timedelta(minutes=2)),
        (timedelta(days=1), 1000, timedelta(minutes=10)),
    ]


@pytest.mark.parametrize("group", JOB_GROUPS)
def test_every_job_setting_is_read_and_validated_alike(group: str) -> None:
    prefix = f"PIN_{group}__"
    settings = load_settings(
        {
            f"{prefix}POLLING_INTERVAL": "PT7M",
            f"{prefix}BATCH_SIZE": "7",
            f"{prefix}MAX_RUN_DURATION": "7",
        }
    )
    job = getattr(settings, group.lower())
    assert (job.polling_interval, job.batch_size, job.max_run_duration) == (
        timedelta(minutes=7),
        7,
        timedelta(seconds=7),
    )
    for name, rule in (
        ("POLLING_INTERVAL", "must be > 0 seconds"),
        ("BATCH_SIZE", "must be > 0"),
        ("MAX_RUN_DURATION", "must be > 0 seconds"),
    ):
        with pytest.raises(SettingsError) as caught:
            load_settings({f"{prefix}{name}": "0"})
        assert str(caught.value) == f"{prefix}{name} {rule}"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("300", timedelta(minutes=5)),
        ("PT5M", timedelta(minutes=5)),
        ("0.5", timedelta(seconds=0.5)),
        ("P1DT2H", timedelta(days=1, hours=2)),
    ],
)
def test_durations_accept_seconds_and_iso_8601(raw: str, expected: timedelta) -> None:
    settings = load_settings({"PIN_EXPIRE_SESSIONS__POLLING_INTERVAL": raw})
    assert settings.expire_sessions.polling_interval == expected


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"PIN_EXPIRE_SESSIONS__BATCH_SIZE": "0"}, "PIN_EXPIRE_SESSIONS__BATCH_SIZE must be > 0"),
        ({"PIN_EXPIRE_SESSIONS__BATCH_SIZE": "many"}, "PIN_EXPIRE_SESSIONS__BATCH_SIZE "),
        (
            {"PIN_EXPIRE_SESSIONS__POLLING_INTERVAL": "0"},
            "PIN_EXPIRE_SESSIONS__POLLING_INTERVAL must be > 0 seconds",
        ),
        (
            {"PIN_ACTIVITY_CLOSER__INACTIVITY_THRESHOLD": "soon"},
            "PIN_ACTIVITY_CLOSER__INACTIVITY_THRESHOLD must be seconds or an ISO-8601 duration",
        ),
        ({"PIN_REFRESH_REUSE_INTERVAL": "-1"}, "PIN_REFRESH_REUSE_INTERVAL must be >= 0 seconds"),
        (
            {"PIN_EXPIRE_SESSIONS__POLLING_INTERVAL": "inf"},
            "PIN_EXPIRE_SESSIONS__POLLING_INTERVAL must be a finite number of seconds",
        ),
        (
            {"PIN_EXPIRE_SESSIONS__MAX_RUN_DURATION": "-Infinity"},
            "PIN_EXPIRE_SESSIONS__MAX_RUN_DURATION must be a finite number of seconds",
        ),
        (
            {"PIN_ACTIVITY_RETENTION__AGE": "nan"},
            "PIN_ACTIVITY_RETENTION__AGE must be a finite number of seconds",
        ),
        (
            {"PIN_EXPIRE_SESSIONS__POLLING_INTERVAL": "1e20"},
            "PIN_EXPIRE_SESSIONS__POLLING_INTERVAL is too long for a duration",
        ),
        ({"PIN_HTTP__READ_TIMEOUT": "0"}, "PIN_HTTP__READ_TIMEOUT must be > 0 seconds"),
        (
            {"PIN_HTTP__READ_TIMEOUT": "slow"},
            "PIN_HTTP__READ_TIMEOUT must be seconds or an ISO-8601 duration",
        ),
        ({"PIN_ENV": "staging"}, "PIN_ENV "),
        (
            {"PIN_DATABASE__READ_URL": "mysql://replica/pin"},
            "PIN_DATABASE__READ_URL must be a postgresql:// URL",
        ),
        (
            {"PIN_DATABASE__READ_MAX_LAG": "0"},
            "PIN_DATABASE__READ_MAX_LAG must be > 0 seconds",
        ),
        (
            {"PIN_SIGNING_KEYS__PUBLISH_AHEAD": "PT5M"},
            "PIN_SIGNING_KEYS__PUBLISH_AHEAD must be above 300 seconds, the JWKS cache age",
        ),
        ({"PIN_ENV": "prod"}, "PIN_SECRET_KEY is required when PIN_ENV=prod"),
        (
            {"PIN_ENV": "prod", "PIN_SECRET_KEY": "x" * 40},
            "PIN_DATABASE_URL is required when PIN_ENV=prod",
        ),
        (
            {"PIN_ENV": "prod", "PIN_SECRET_KEY": "", "PIN_DATABASE_URL": "postgresql://db/pin"},
            "PIN_SECRET_KEY is required when PIN_ENV=prod",
        ),
        (
            {
                "PIN_ENV": "prod",
                "PIN_SECRET_KEY": "x" * 40,
                "PIN_DATABASE_URL": "postgresql://db/pin",
                "PIN_DEV_CODES": "1",
            },
            "PIN_DEV_CODES is refused when PIN_ENV=prod",
        ),
    ],
)
def test_a_bad_value_names_the_variable_and_the_rule(environ: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError) as caught:
        load_settings(environ)
    assert str(caught.value).startswith(message)
    assert "\n" not in str(caught.value)


def test_prod_accepts_a_complete_configuration() -> None:
    settings = load_settings(
        {
            "PIN_ENV": "prod",
            "PIN_SECRET_KEY": "x" * 40,
            "PIN_DATABASE_URL": "postgresql://db/pin",
            **CONFIGURED_GATEWAY,
        }
    )
    assert settings.env is Environment.PROD


PROD = {"PIN_ENV": "prod", "PIN_DATABASE_URL": "postgresql://db/pin", **CONFIGURED_GATEWAY}


@pytest.mark.parametrize(
    ("secret", "name"),
    [
        ({"PIN_SECRET_KEY": "x" * 31}, "PIN_SECRET_KEY"),
        ({"PIN_SECRET_KEY": "short"}, "PIN_SECRET_KEY"),
        # Bytes, not characters: 15 two-byte characters are 30 bytes.
        ({"PIN_SECRET_KEY": "é" * 15}, "PIN_SECRET_KEY"),
        ({"PIN_JWT_SECRET": "o" * 31}, "PIN_JWT_SECRET"),
    ],
)
def test_prod_refuses_a_secret_key_under_32_bytes_naming_its_variable(
    secret: dict[str, str], name: str
) -> None:
    """SPEC §11: less than the 256 bits the derived keys carry is refused, not warned about."""
    with pytest.raises(SettingsError) as caught:
        load_settings({**PROD, **secret})
    assert str(caught.value) == (
        f"{name} must be at least 32 bytes when PIN_ENV=prod (e.g. openssl rand -hex 32)"
    )


def test_prod_accepts_a_secret_of_32_bytes_and_dev_only_flags_a_short_one() -> None:
    for secret in ("x" * 32, "é" * 16):
        assert not load_settings({**PROD, "PIN_SECRET_KEY": secret}).secret_key_is_short
    assert load_settings({"PIN_SECRET_KEY": "x" * 31}).secret_key_is_short
    assert load_settings({}).secret_key_is_short is False


def test_docs_are_served_outside_prod_and_in_prod_only_when_asked() -> None:
    prod = {**PROD, "PIN_SECRET_KEY": "x" * 32}
    assert load_settings({}).serves_docs
    assert not load_settings(prod).serves_docs
    assert load_settings({**prod, "PIN_HTTP__DOCS": "1"}).serves_docs
    assert not load_settings({"PIN_HTTP__DOCS": "0"}).serves_docs
    assert load_settings({}).serves_metrics_on_api_port
    assert not load_settings({**prod, "PIN_HTTP__DOCS": "1"}).serves_metrics_on_api_port


def test_the_deprecated_pin_jwt_secret_still_serves_as_the_secret_key() -> None:
    environ = {"PIN_ENV": "prod", "PIN_DATABASE_URL": "postgresql://db/pin", **CONFIGURED_GATEWAY}
    old = load_settings({**environ, "PIN_JWT_SECRET": "o" * 40})
    assert old.master_secret is not None and old.master_secret.get_secret_value() == "o" * 40
    assert old.reads_deprecated_secret_name
    both = load_settings({**environ, "PIN_JWT_SECRET": "o" * 40, "PIN_SECRET_KEY": "n" * 40})
    assert both.master_secret is not None and both.master_secret.get_secret_value() == "n" * 40
    assert not load_settings({**environ, "PIN_SECRET_KEY": "n" * 40}).reads_deprecated_secret_name


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("sessions.example.com", "PIN_PUBLIC_URL must be an http:// or https:// URL"),
        ("ftp://sessions.example.com", "PIN_PUBLIC_URL must be an http:// or https:// URL"),
        ("https://", "PIN_PUBLIC_URL must be an http:// or https:// URL"),
        ("https://sessions.example.com/?a=1", "PIN_PUBLIC_URL must not have a query"),
    ],
)
def test_a_public_url_that_cannot_be_an_issuer_is_refused(value: str, message: str) -> None:
    with pytest.raises(SettingsError, match=message.replace("?", r"\?")):
        load_settings({"PIN_PUBLIC_URL": value})


def test_token_settings_default_to_spec_values_and_read_their_variables() -> None:
    defaults = load_settings({})
    assert defaults.public_url is None  # unset: the API's own address (SPEC §11)
    assert defaults.effective_public_url == "http://127.0.0.1:8000"
    assert defaults.m2m_token_ttl == timedelta(minutes=15)
    assert defaults.signing_keys.rotate_after == timedelta(days=30)
    assert defaults.signing_keys.publish_ahead == timedelta(hours=1)
    custom = load_settings(
        {
            "PIN_PUBLIC_URL": "https://sessions.example.com/auth/",
            "PIN_M2M_TOKEN_TTL": "PT5M",
            "PIN_SIGNING_KEYS__ROTATE_AFTER": "P7D",
            "PIN_SIGNING_KEYS__PUBLISH_AHEAD": "600",
        }
    )
    assert custom.public_url == "https://sessions.example.com/auth"
    assert custom.effective_public_url == "https://sessions.example.com/auth"
    assert custom.m2m_token_ttl == timedelta(minutes=5)
    assert custom.signing_keys.rotate_after == timedelta(days=7)
    assert custom.signing_keys.publish_ahead == timedelta(minutes=10)
    with pytest.raises(SettingsError, match="PIN_M2M_TOKEN_TTL must be > 0 seconds"):
        load_settings({"PIN_M2M_TOKEN_TTL": "0"})


def test_variables_of_other_programs_are_ignored() -> None:
    settings = load_settings({"HOME": "/root", "PIN_DEV_CODES": "1"})
    assert settings.dev_codes is True


def test_settings_never_read_the_process_environment_on_their_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """load_settings(environ) is the one way in: the CLI hands it os.environ, tests a mapping."""
    monkeypatch.setenv("PIN_ENV", "staging")
    monkeypatch.setenv("PIN_EXPIRE_SESSIONS__BATCH_SIZE", "7")
    settings = Settings()
    assert (settings.env, settings.expire_sessions.batch_size) == (Environment.DEV, 5000)


def test_a_group_given_whole_as_json_is_read_and_a_broken_one_is_named() -> None:
    assert load_settings({"PIN_HTTP": '{"max_body_bytes": 5}'}).http.max_body_bytes == 5
    with pytest.raises(SettingsError) as refused:
        load_settings({"PIN_HTTP": "{"})
    assert str(refused.value) == "PIN_HTTP must be valid JSON"


def test_the_api_address_is_a_setting_that_an_unset_public_url_follows() -> None:
    """SPEC §11: PIN_HTTP__HOST / PIN_HTTP__PORT (127.0.0.1 / 8000)."""
    defaults = load_settings({})
    assert (defaults.http.host, defaults.http.port) == ("127.0.0.1", 8000)
    moved = load_settings({"PIN_HTTP__HOST": "localhost", "PIN_HTTP__PORT": "18310"})
    assert (moved.http.host, moved.http.port) == ("localhost", 18310)
    assert moved.effective_public_url == "http://localhost:18310"
    # What a process that bound another address sees; a set PIN_PUBLIC_URL stays as it is.
    assert moved.listening_on("::1", 40001).effective_public_url == "http://[::1]:40001"
    assert moved.listening_on("0.0.0.0", 40001).effective_public_url == "http://127.0.0.1:40001"
    public = load_settings({"PIN_PUBLIC_URL": "https://sessions.example.com"})
    assert public.listening_on("0.0.0.0", 1).effective_public_url == "https://sessions.example.com"


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("PIN_HTTP__PORT", "65536", "PIN_HTTP__PORT must be <= 65535"),
        ("PIN_HTTP__PORT", "-1", "PIN_HTTP__PORT must be >= 0"),
        ("PIN_HTTP__PORT", "http", "PIN_HTTP__PORT input should be a valid integer"),
        ("PIN_HTTP__HOST", "", "PIN_HTTP__HOST string should have at least 1 character"),
    ],
)
def test_a_bad_api_address_is_refused_naming_the_variable(
    name: str, value: str, message: str
) -> None:
    with pytest.raises(SettingsError) as caught:
        load_settings({name: value})
    assert str(caught.value).startswith(message)


def test_the_read_replica_is_optional_with_a_ten_second_bound() -> None:
    """SPEC §11: PIN_DATABASE__READ_URL unset (or empty, as a deployment passes it through)
    means every read on the primary; READ_MAX_LAG is 10 s unless set."""
    assert load_settings({}).database.read_url is None
    assert load_settings({"PIN_DATABASE__READ_URL": ""}).database.read_url is None
    assert load_settings({}).database.read_max_lag == timedelta(seconds=10)

    settings = load_settings(
        {
            "PIN_DATABASE__READ_URL": " postgresql://reader:pa55w0rd@replica:5432/pin ",
            "PIN_DATABASE__READ_MAX_LAG": "PT30S",
        }
    )
    assert settings.database.read_url is not None
    assert settings.database.read_url.get_secret_value() == (
        "postgresql://reader:pa55w0rd@replica:5432/pin"
    )
    assert "pa55w0rd" not in repr(settings)
    assert settings.database.read_max_lag == timedelta(seconds=30)

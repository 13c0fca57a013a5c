"""``PIN_KAFKA__*``: TLS and SASL reach librdkafka; a bad value stops the process (SPEC §9).

The test broker (Tansu 0.6) speaks SASL/SCRAM only, and creates its users through the
same authenticated connection it then requires, which its memory storage cannot seed;
so SASL is proven here at the configuration level: every client of ours is built by
librdkafka itself from these settings, which refuses what it cannot use.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer

from pin_sessions.platform.messaging.kafka import (
    ClientOptionsRejected,
    admin_config,
    check_client_options,
    consumer_config,
    producer_config,
)
from pin_sessions.settings import SettingsError, load_settings
from tests.conftest import TEST_SECRET_KEY
from tests.support.processes import pin_sessions

BROKERS = "kafka-1.internal:9093,kafka-2.internal:9093"


def test_sasl_over_tls_settings_become_the_librdkafka_properties_of_every_client(
    tmp_path: Path,
) -> None:
    settings = load_settings(
        {
            "PIN_KAFKA_BOOTSTRAP_SERVERS": BROKERS,
            "PIN_KAFKA__SECURITY_PROTOCOL": "sasl_ssl",
            "PIN_KAFKA__SASL_MECHANISM": "SCRAM-SHA-512",
            "PIN_KAFKA__SASL_USERNAME": "pin-sessions",
            "PIN_KAFKA__SASL_PASSWORD": "s3cret",
        }
    )
    options = settings.kafka.librdkafka_options()
    assert options == {
        "security.protocol": "sasl_ssl",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "pin-sessions",
        "sasl.password": "s3cret",
        "ssl.endpoint.identification.algorithm": "https",
    }
    assert "s3cret" not in repr(settings)  # a secret never reaches a log line
    for config in (
        producer_config(BROKERS, options, message_timeout_ms=1000),
        consumer_config(BROKERS, options, "dev-stats-session-ended", session_timeout_ms=6000),
        admin_config(BROKERS, options),
    ):
        assert {key: config[key] for key in options} == options
    # librdkafka accepts them as given (it refuses unknown or ill-typed properties).
    Producer(producer_config(BROKERS, options, message_timeout_ms=1000)).flush(0)
    Consumer(consumer_config(BROKERS, options, "group", session_timeout_ms=6000)).close()
    check_client_options(BROKERS, options)


@pytest.mark.parametrize(
    ("environ", "line"),
    [
        (
            {"PIN_KAFKA__SECURITY_PROTOCOL": "sasl_ssl"},
            "PIN_KAFKA__SASL_MECHANISM is required when PIN_KAFKA__SECURITY_PROTOCOL=sasl_ssl",
        ),
        (
            {"PIN_KAFKA__SECURITY_PROTOCOL": "tls"},
            "PIN_KAFKA__SECURITY_PROTOCOL input should be 'plaintext', 'ssl', 'sasl_plaintext' "
            "or 'sasl_ssl'",
        ),
        (
            {"PIN_KAFKA__SASL_USERNAME": "pin"},
            "PIN_KAFKA__SASL_USERNAME needs a sasl_* PIN_KAFKA__SECURITY_PROTOCOL",
        ),
        (
            {"PIN_KAFKA__SECURITY_PROTOCOL": "ssl", "PIN_KAFKA__SSL_CA_LOCATION": "/no/ca.pem"},
            "PIN_KAFKA__SSL_CA_LOCATION names no readable file: /no/ca.pem",
        ),
    ],
)
def test_a_bad_kafka_setting_is_one_line_naming_it(environ: dict[str, str], line: str) -> None:
    with pytest.raises(SettingsError) as caught:
        load_settings(environ)
    assert str(caught.value) == line


def test_a_certificate_librdkafka_refuses_stops_the_process_with_one_line(
    tmp_path: Path, database_url: str
) -> None:
    not_pem = tmp_path / "ca.pem"
    not_pem.write_text("not a certificate\n")
    with pytest.raises(ClientOptionsRejected, match=r"^PIN_KAFKA__SSL_CA_LOCATION "):
        check_client_options(BROKERS, {"security.protocol": "ssl", "ssl.ca.location": str(not_pem)})
    process = pin_sessions(
        "relay",
        env={
            "PIN_DATABASE_URL": database_url,
            "PIN_DATA_DIR": str(tmp_path / "data"),
            "PIN_SECRET_KEY": TEST_SECRET_KEY,
            "PIN_KAFKA_BOOTSTRAP_SERVERS": BROKERS,
            "PIN_KAFKA__SECURITY_PROTOCOL": "ssl",
            "PIN_KAFKA__SSL_CA_LOCATION": str(not_pem),
        },
    )
    _, err = process.communicate(timeout=60)
    assert process.returncode == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("PIN_KAFKA__SSL_CA_LOCATION is refused by librdkafka: ")

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import httpx
import jwt
import pytest

from pin_sessions.cli.up import with_up_defaults
from pin_sessions.platform.permissions import USER_ACTIVITY_INTERNAL as INTERNAL
from pin_sessions.platform.served_url import SERVED_URL_FILE
from pin_sessions.settings import load_settings
from tests.conftest import TEST_SECRET_KEY
from tests.support.cli import run_cli
from tests.support.processes import free_port, pin_sessions, wait_until_ready
from tests.support.sms_gateways import CONFIGURED_GATEWAY


def _stop(process: subprocess.Popen[str], signum: signal.Signals) -> str:
    """Signal it and wait for its end; its stderr. The README's "within 5 seconds" is the
    roles' grace period (a role still running then is cancelled); a stop's wall time on a
    shared machine is the scheduler's as much as ours, so the wait is bounded only well short
    of the API's 30 s drain, which a stop must never wait for."""
    process.send_signal(signum)
    _, err = process.communicate(timeout=20)
    return err


def test_up_serves_readyz_then_stops_on_sigint(database_url: str, tmp_path: Path) -> None:
    port = free_port()
    env = {
        "PIN_DATABASE_URL": database_url,
        "PIN_DATA_DIR": str(tmp_path),
        "PIN_SECRET_KEY": TEST_SECRET_KEY,
    }
    process = pin_sessions("up", "--port", str(port), env=env)
    try:
        base = f"http://127.0.0.1:{port}"
        wait_until_ready(base, process)
        _token_minted_beside_up_is_accepted(base, env)
    finally:
        err = _stop(process, signal.SIGINT)
    assert process.returncode == 0, err
    assert '"event": "listening"' in err and f"127.0.0.1:{port}" in err
    # Gone with it: a command run now names its own settings' URL again.
    assert not (tmp_path / SERVED_URL_FILE).exists()


def _token_minted_beside_up_is_accepted(base: str, env: dict[str, str]) -> None:
    """`token m2m` on up's data directory, without its --port: the issuer up accepts."""
    created = run_cli("clients", "create", "--name", "crm", "--scope", INTERNAL, env=env)
    assert created.returncode == 0, created.stderr
    minted = run_cli("token", "m2m", "--client", "crm", env=env)
    assert minted.returncode == 0, minted.stderr
    token = minted.stdout.strip()
    assert jwt.decode(token, options={"verify_signature": False})["iss"] == base
    unknown_device = "0b7f8c3e-6a52-4c1e-9d1a-5f0c2a7e4b11"
    internal = httpx.get(
        f"{base}/internal/sessions/{unknown_device}/link",
        headers={"Authorization": f"Bearer {token}"},
    )
    assert internal.status_code == 404, internal.text  # accepted: no such device


def test_up_on_embedded_postgres_keeps_data_and_refuses_a_second_up(tmp_path: Path) -> None:
    env = {"PIN_DATA_DIR": str(tmp_path / "data")}
    port = free_port()
    first = pin_sessions("up", "--port", str(port), env=env)
    try:
        wait_until_ready(f"http://127.0.0.1:{port}", first)
        assert (tmp_path / "data" / "pg" / "PG_VERSION").exists()
        second = pin_sessions("up", "--port", str(free_port()), env=env)
        _, err = second.communicate(timeout=30)
        assert second.returncode == 1
        assert "in use by another `pin-sessions up`" in err
        # The first one is untouched by the refused second one.
        assert httpx.get(f"http://127.0.0.1:{port}/readyz").status_code == 200
    finally:
        err = _stop(first, signal.SIGTERM)
    assert first.returncode == 0, err
    assert "embedded postgres stopped" in err
    # Data survives the stop: a restart finds the same cluster.
    assert (tmp_path / "data" / "pg" / "PG_VERSION").exists()
    restart = pin_sessions("up", "--port", str(port), env=env)
    try:
        wait_until_ready(f"http://127.0.0.1:{port}", restart)
    finally:
        _stop(restart, signal.SIGINT)
    assert restart.returncode == 0


@pytest.mark.parametrize(
    ("environ", "readable"),
    [
        ({}, True),
        ({"PIN_DEV_CODES": "0"}, False),
        ({"PIN_DEV_CODES": "1"}, True),
        (
            {"PIN_ENV": "prod", "PIN_SECRET_KEY": "x" * 40, "PIN_DATABASE_URL": "postgresql://db"},
            False,
        ),
    ],
)
def test_up_shows_sign_in_codes_unless_pin_dev_codes_or_prod_says_otherwise(
    environ: dict[str, str], readable: bool
) -> None:
    """SPEC §2: PIN_DEV_CODES defaults to 0, and `up` sets 1; the settings alone decide."""
    assert bool(with_up_defaults(load_settings(environ)).dev_codes) is readable


def test_a_bad_setting_exits_2_naming_the_variable(tmp_path: Path) -> None:
    """Real processes: the exit status and the one line on stderr are the program's own (the
    other refusals call ``main`` in process)."""
    for command in (["serve"], ["up"], ["migrate"]):
        process = pin_sessions(
            *command, env={"PIN_EXPIRE_SESSIONS__BATCH_SIZE": "0", "PIN_DATA_DIR": str(tmp_path)}
        )
        _, err = process.communicate(timeout=30)
        assert process.returncode == 2
        assert err.strip() == "PIN_EXPIRE_SESSIONS__BATCH_SIZE must be > 0"


@pytest.mark.parametrize(
    ("raw", "rule"),
    [("inf", "must be a finite number of seconds"), ("1e20", "is too long for a duration")],
)
def test_a_duration_out_of_range_exits_2_naming_the_variable(
    raw: str, rule: str, tmp_path: Path
) -> None:
    ran = run_cli(
        "migrate",
        env={"PIN_EXPIRE_SESSIONS__POLLING_INTERVAL": raw, "PIN_DATA_DIR": str(tmp_path)},
    )
    assert ran.returncode == 2
    assert ran.stderr.strip() == f"PIN_EXPIRE_SESSIONS__POLLING_INTERVAL {rule}"


def test_a_short_secret_under_its_old_name_starts_with_warnings_that_keep_it_secret(
    database_url: str, tmp_path: Path
) -> None:
    """Outside prod, that is: prod refuses a short secret (the next test)."""
    secret = "short-but-set"
    ran = run_cli(
        "migrate",
        env={
            "PIN_JWT_SECRET": secret,
            "PIN_DATABASE_URL": database_url,
            "PIN_DATA_DIR": str(tmp_path),
        },
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == '{"applied": []}'
    warnings = [
        event["event"]
        for event in map(json.loads, filter(None, ran.stderr.splitlines()))
        if event.get("level") == "warning"
    ]
    assert warnings == [
        "PIN_JWT_SECRET is deprecated: set PIN_SECRET_KEY instead",
        "PIN_SECRET_KEY is shorter than recommended",
    ]
    assert secret not in ran.stderr


@pytest.mark.parametrize("command", [["serve"], ["up"], ["migrate"], ["job", "signing-keys"]])
def test_a_short_secret_key_in_prod_exits_2_naming_the_variable(
    database_url: str, tmp_path: Path, command: list[str]
) -> None:
    secret = "five5"
    process = pin_sessions(
        *command,
        env={
            "PIN_ENV": "prod",
            "PIN_SECRET_KEY": secret,
            "PIN_DATABASE_URL": database_url,
            "PIN_DATA_DIR": str(tmp_path),
            **CONFIGURED_GATEWAY,
        },
    )
    try:
        _, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:  # it started instead of refusing: stop it, fail below
            process.kill()
            process.communicate()
    assert process.returncode == 2, err
    assert err.strip() == (
        "PIN_SECRET_KEY must be at least 32 bytes when PIN_ENV=prod (e.g. openssl rand -hex 32)"
    )
    assert secret not in err


def test_migrate_prints_what_it_applied(database_url: str, tmp_path: Path) -> None:
    ran = run_cli("migrate", env={"PIN_DATABASE_URL": database_url, "PIN_DATA_DIR": str(tmp_path)})
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == '{"applied": []}'


def test_serve_runs_the_api_only(database_url: str, tmp_path: Path) -> None:
    port = free_port()
    process = pin_sessions(
        "serve",
        "--port",
        str(port),
        env={"PIN_DATABASE_URL": database_url, "PIN_DATA_DIR": str(tmp_path)},
    )
    wait_until_ready(f"http://127.0.0.1:{port}", process)
    err = _stop(process, signal.SIGTERM)
    assert process.returncode == 0, err


def test_serve_with_workers_wires_each_worker_from_the_environment_it_inherits(
    tmp_path: Path,
) -> None:
    """Each uvicorn worker builds its own API; on the embedded database it finds the parent's."""
    port = free_port()
    process = pin_sessions(
        "serve", "--port", str(port), "--workers", "2", env={"PIN_DATA_DIR": str(tmp_path)}
    )
    try:
        wait_until_ready(f"http://127.0.0.1:{port}", process)
    finally:
        err = _stop(process, signal.SIGTERM)
    assert process.returncode == 0, err


def test_a_job_on_a_fresh_embedded_data_dir_brings_the_schema_up_first(tmp_path: Path) -> None:
    process = pin_sessions(
        "job", "expire-sessions", "--once", env={"PIN_DATA_DIR": str(tmp_path / "data")}
    )
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, err
    result = json.loads(out)
    assert (result["refreshExpired"], result["sicrExpired"], result["backlogRemaining"]) == (
        0,
        0,
        0,
    )
    assert "phase failed" not in err

"""Where the API listens, and what it then calls itself (SPEC §11).

``PIN_HTTP__HOST`` / ``PIN_HTTP__PORT`` choose the address; ``--host`` / ``--port`` win over
them for one process; ``make up PORT=…`` passes one. With ``PIN_PUBLIC_URL`` unset, the
address really bound — port 0 included — is what the tokens' ``iss``, the OAuth metadata,
the banner and the ``listening`` line name.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
from pathlib import Path
from typing import Any

import httpx
import jwt

from pin_sessions.cli.serve import bind_api
from pin_sessions.settings import load_settings
from tests.conftest import TEST_SECRET_KEY, LogCapture
from tests.support.processes import PROJECT_ROOT, free_port, pin_sessions, wait_until_ready
from tests.support.waiting import wait_until_sync


def _listening_line(log: Path, process: subprocess.Popen[str]) -> dict[str, Any]:
    """The ``listening`` JSON line the process wrote to ``log``."""
    found: list[dict[str, Any]] = []

    def logged() -> bool:
        if process.poll() is not None:
            raise AssertionError(f"exited with {process.returncode}:\n{log.read_text()[-3000:]}")
        for line in log.read_text().splitlines():
            if line.startswith("{") and json.loads(line).get("event") == "listening":
                found.append(json.loads(line))
                return True
        return False

    wait_until_sync(logged, timeout=60, interval=0.1)
    return found[0]


def _stop(process: subprocess.Popen[str]) -> None:
    process.send_signal(signal.SIGINT)
    process.communicate(timeout=30)
    assert process.returncode == 0


def _client_token(base: str, env: dict[str, str]) -> str:
    """A service token from ``POST /oauth/token`` for a client the CLI registers."""
    created = pin_sessions(
        "clients", "create", "--name", "crm", "--scope", "user-activity.internal", env=env
    )
    out, err = created.communicate(timeout=60)
    assert created.returncode == 0, err
    client = json.loads(out)
    answer = httpx.post(
        f"{base}/oauth/token",
        data={"grant_type": "client_credentials"},
        auth=(client["clientId"], client["clientSecret"]),
    )
    assert answer.status_code == 200, answer.text
    token: str = answer.json()["access_token"]
    return token


def test_port_0_listens_on_a_free_port_that_the_issuer_metadata_and_log_name(
    database_url: str, tmp_path: Path
) -> None:
    env = {
        "PIN_DATABASE_URL": database_url,
        "PIN_DATA_DIR": str(tmp_path / "data"),
        "PIN_SECRET_KEY": TEST_SECRET_KEY,
    }
    log = tmp_path / "serve.log"
    with log.open("w") as output:
        process = pin_sessions("serve", "--port", "0", env=env, output=output)
    try:
        listening = _listening_line(log, process)
        base = listening["url"]
        port = int(base.rsplit(":", 1)[1])
        assert port != 0
        assert base == f"http://127.0.0.1:{port}"
        assert listening["publicUrl"] == base
        assert listening["docs"] == f"{base}/docs"
        wait_until_ready(base, process)

        metadata = httpx.get(f"{base}/.well-known/oauth-authorization-server").json()
        assert metadata["issuer"] == base
        assert metadata["token_endpoint"] == f"{base}/oauth/token"
        assert metadata["jwks_uri"] == f"{base}/.well-known/jwks.json"
        assert metadata["introspection_endpoint"] == f"{base}/oauth/introspect"

        token = _client_token(base, env)
        assert jwt.decode(token, options={"verify_signature": False})["iss"] == base
        # The API accepts what it signed: its verifier expects the same issuer.
        unknown_device = "0b7f8c3e-6a52-4c1e-9d1a-5f0c2a7e4b11"
        internal = httpx.get(
            f"{base}/internal/sessions/{unknown_device}/link",
            headers={"Authorization": f"Bearer {token}"},
        )
        assert internal.status_code == 404, internal.text
    finally:
        _stop(process)


def test_pin_http_port_chooses_the_port_and_a_port_flag_wins_over_it(
    database_url: str, tmp_path: Path
) -> None:
    from_env, from_flag = free_port(), free_port()
    env = {
        "PIN_DATABASE_URL": database_url,
        "PIN_DATA_DIR": str(tmp_path / "data"),
        "PIN_SECRET_KEY": TEST_SECRET_KEY,
        "PIN_HTTP__PORT": str(from_env),
    }
    by_env = pin_sessions("serve", env=env)
    try:
        wait_until_ready(f"http://127.0.0.1:{from_env}", by_env)
    finally:
        _stop(by_env)
    by_flag = pin_sessions("serve", "--port", str(from_flag), env=env)
    try:
        base = f"http://127.0.0.1:{from_flag}"
        wait_until_ready(base, by_flag)
        metadata = httpx.get(f"{base}/.well-known/oauth-authorization-server").json()
        assert metadata["token_endpoint"] == f"{base}/oauth/token"
        with socket.socket() as probe:
            assert probe.connect_ex(("127.0.0.1", from_env)) != 0  # nothing listens there
    finally:
        _stop(by_flag)


def test_make_up_port_passes_the_port_to_up(tmp_path: Path) -> None:
    """`make up PORT=…` on the embedded database: the API, its metadata and banner on that port."""
    port = free_port()
    base = {key: os.environ[key] for key in ("PATH", "HOME", "LANG") if key in os.environ}
    # -o: the runtime install is the test's own venv, already made; `up` is what is run.
    process = subprocess.Popen(
        ["make", "-s", "-o", ".venv/.runtime-stamp", "up", f"PORT={port}"],
        cwd=PROJECT_ROOT,
        env={**base, "PIN_DATA_DIR": str(tmp_path / "data"), "PIN_LOG_FORMAT": "json"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # Ctrl-C reaches make and `up` alike, as in a terminal
    )
    try:
        url = f"http://127.0.0.1:{port}"
        wait_until_ready(url, process, timeout=120)
        metadata = httpx.get(f"{url}/.well-known/oauth-authorization-server").json()
        assert metadata["token_endpoint"] == f"{url}/oauth/token"
    finally:
        os.killpg(process.pid, signal.SIGINT)
        _, err = process.communicate(timeout=60)
    # make itself dies of the Ctrl-C it forwards; `up` stopped cleanly under it.
    assert process.returncode in (0, -signal.SIGINT), err[-3000:]
    events = [json.loads(line)["event"] for line in err.splitlines() if line.startswith("{")]
    assert events[-1] == "stopped", err[-3000:]
    assert f'"url": "{url}"' in err


def test_a_wildcard_host_without_a_public_url_warns_that_others_cannot_reach_the_issuer(
    captured_logs: LogCapture,
) -> None:
    settings = load_settings({"PIN_HTTP__HOST": "0.0.0.0", "PIN_HTTP__PORT": "0"})
    bound, sock = bind_api(settings, argparse.Namespace(host=None, port=None))
    with sock:
        port = sock.getsockname()[1]
        assert bound.http.port == port
        assert bound.effective_public_url == f"http://127.0.0.1:{port}"
    warnings = [json.loads(line) for line in captured_logs.lines() if "PIN_PUBLIC_URL" in line]
    assert warnings[-1]["issuer"] == f"http://127.0.0.1:{port}"
    assert warnings[-1]["level"] == "warning"


def test_a_taken_port_stops_serve_with_one_line_naming_it(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        process = pin_sessions(
            "serve",
            "--port",
            str(port),
            env={"PIN_DATABASE_URL": "postgresql://unused/pin", "PIN_DATA_DIR": str(tmp_path)},
        )
        _, err = process.communicate(timeout=60)
    assert process.returncode == 1
    assert f"pin-sessions: cannot listen on 127.0.0.1:{port}" in err
    assert "Traceback" not in err

"""A command beside a running ``up`` names the issuer ``up`` serves, and only while it runs."""

from __future__ import annotations

import json
from pathlib import Path

import jwt

from pin_sessions.identity.clients import ServiceClients
from pin_sessions.platform.permissions import ADMIN
from pin_sessions.platform.runtime import Runtime
from pin_sessions.platform.served_url import SERVED_URL_FILE, served_public_url, serving_public_url
from pin_sessions.settings import DEFAULT_PUBLIC_URL
from tests.support.cli import run_cli

UP_URL = "http://127.0.0.1:8100"


def _issuer(env: dict[str, str]) -> str:
    minted = run_cli("token", "m2m", "--client", "crm", env=env)
    assert minted.returncode == 0, minted.stderr
    issuer: str = jwt.decode(minted.stdout.strip(), options={"verify_signature": False})["iss"]
    return issuer


async def test_token_m2m_beside_up_names_the_url_up_serves_unless_pin_public_url_is_set(
    settings_env: dict[str, str], runtime: Runtime
) -> None:
    await ServiceClients(runtime.database).create("crm", [ADMIN], runtime.clock.now())
    data_dir = Path(settings_env["PIN_DATA_DIR"])
    data_dir.mkdir(parents=True, exist_ok=True)
    with serving_public_url(data_dir, UP_URL):
        assert _issuer(settings_env) == UP_URL
        explicit = {**settings_env, "PIN_PUBLIC_URL": "https://sessions.example.com"}
        assert _issuer(explicit) == "https://sessions.example.com"
    assert not (data_dir / SERVED_URL_FILE).exists()
    assert _issuer(settings_env) == DEFAULT_PUBLIC_URL


def test_a_file_left_by_a_killed_up_is_ignored(tmp_path: Path) -> None:
    # The kernel hands out pids below pid_max only: this one names no process.
    gone = int(Path("/proc/sys/kernel/pid_max").read_text())
    (tmp_path / SERVED_URL_FILE).write_text(json.dumps({"url": UP_URL, "pid": gone}))
    assert served_public_url(tmp_path) is None
    (tmp_path / SERVED_URL_FILE).write_text("not json")
    assert served_public_url(tmp_path) is None
    assert served_public_url(tmp_path / "missing") is None

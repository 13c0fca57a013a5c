"""``pin-sessions token m2m`` and ``pin-sessions users grant|revoke``: called in process, but
for the first test, which runs the real program and uses the token it prints."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import httpx
import jwt

from tests.identity.flows import new_phone, refresh, sign_in
from tests.support.cli import Ran, run_cli
from tests.support.processes import pin_sessions
from tests.support.tokens import verified_claims

MANAGER = "user-activity.history.view-by-user"


def _run(*args: str, env: dict[str, str]) -> Ran:
    return run_cli(*args, env=env)


def _run_process(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    process = pin_sessions(*args, env=env)
    out, err = process.communicate(timeout=60)
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


def _claims(token: str) -> dict[str, Any]:
    """What a token says; these tests are about its content, its signature is checked elsewhere."""
    claims: dict[str, Any] = jwt.decode(token, options={"verify_signature": False})
    return claims


async def test_token_m2m_prints_a_scoped_machine_token(
    settings_env: dict[str, str], http: httpx.AsyncClient
) -> None:
    result = _run_process(
        "token",
        "m2m",
        "--client",
        "reports",
        "--scope",
        "user-activity.internal",
        "admin",
        env=settings_env,
    )
    assert result.returncode == 0, result.stderr
    # Signed with the key the API publishes, as the token endpoint's tokens are.
    claims = await verified_claims(http, result.stdout.strip(), audience="pin-internal")
    assert (claims["iss"], claims["sub"], claims["client_id"]) == (
        "http://127.0.0.1:8000",
        "reports",
        "reports",
    )
    assert claims["scope"] == "admin user-activity.internal"
    assert claims["exp"] - claims["iat"] == 15 * 60
    assert "sid" not in claims


def test_token_m2m_is_refused_in_prod(settings_env: dict[str, str]) -> None:
    """SPEC §2: a development convenience; services use POST /oauth/token."""
    env = {**settings_env, "PIN_ENV": "prod"}
    del env["PIN_DEV_CODES"]  # refused in prod on its own
    result = _run("token", "m2m", "--client", "reports", "--scope", "admin", env=env)
    assert result.returncode == 2
    assert result.stdout == ""
    assert "refused when PIN_ENV=prod" in result.stderr


def test_token_m2m_takes_scopes_from_every_scope_option(settings_env: dict[str, str]) -> None:
    result = _run(
        "token",
        "m2m",
        "--client",
        "reports",
        "--scope",
        "user-activity.internal",
        "--scope",
        "admin",
        env=settings_env,
    )
    assert result.returncode == 0, result.stderr
    assert _claims(result.stdout.strip())["scope"] == "admin user-activity.internal"


async def test_granted_permissions_ride_in_access_tokens_until_withdrawn(
    settings_env: dict[str, str], http: httpx.AsyncClient
) -> None:
    phone = new_phone()
    # Granted before the first sign-in: the operator provisions the manager's user.
    granted = _run(
        "users",
        "grant",
        "--phone",
        phone,
        "--permission",
        MANAGER,
        "--permission",  # repeated options add up, as for --scope
        "dev-stats.view",
        env=settings_env,
    )
    assert granted.returncode == 0, granted.stderr
    output = json.loads(granted.stdout)
    assert output["grant"] == ["dev-stats.view", MANAGER]
    assert phone not in granted.stdout + granted.stderr
    tokens = await sign_in(http, phone)
    assert tokens["userId"] == output["userId"]
    assert _claims(tokens["accessToken"])["permissions"] == ["dev-stats.view", MANAGER]

    withdrawn = _run(
        "users", "revoke", "--phone", phone, "--permission", "dev-stats.view", env=settings_env
    )
    assert withdrawn.returncode == 0, withdrawn.stderr
    refreshed = (await refresh(http, tokens["refreshToken"])).json()
    assert _claims(refreshed["accessToken"])["permissions"] == [MANAGER]


def test_users_commands_refuse_bad_input(settings_env: dict[str, str]) -> None:
    unknown = _run(
        "users", "revoke", "--phone", new_phone(), "--permission", MANAGER, env=settings_env
    )
    assert unknown.returncode == 1
    assert "No user has this phone number" in unknown.stderr
    bad_phone = _run("users", "grant", "--phone", "0044", "--permission", MANAGER, env=settings_env)
    assert bad_phone.returncode == 2
    bad_permission = _run(
        "users", "grant", "--phone", new_phone(), "--permission", "Admin!", env=settings_env
    )
    assert bad_permission.returncode == 2

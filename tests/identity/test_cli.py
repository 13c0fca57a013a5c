"""``pin-sessions token m2m`` and ``pin-sessions users grant|revoke`` as real subprocesses."""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime
from typing import Any

import httpx
import jwt

from pin_sessions.platform.auth import MachinePrincipal, TokenCodec
from tests.conftest import TEST_JWT_SECRET
from tests.identity.flows import new_phone, refresh, sign_in
from tests.support.processes import pin_sessions

MANAGER = "user-activity.history.view-by-user"


def _run(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    process = pin_sessions(*args, env=env)
    out, err = process.communicate(timeout=60)
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


def _claims(token: str) -> dict[str, Any]:
    claims: dict[str, Any] = jwt.decode(
        token,
        TEST_JWT_SECRET,
        algorithms=["HS256"],
        options={"verify_exp": False, "verify_iat": False},
    )
    return claims


def test_token_m2m_prints_a_scoped_machine_token(settings_env: dict[str, str]) -> None:
    result = _run(
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
    token = result.stdout.strip()
    claims = _claims(token)
    assert (claims["iss"], claims["sub"]) == ("pin-identity", "reports")
    assert claims["scope"] == "admin user-activity.internal"
    assert "sid" not in claims
    issued_at = datetime.fromtimestamp(claims["iat"], UTC)
    principal = TokenCodec(TEST_JWT_SECRET.encode()).decode(token, now=issued_at)
    assert principal == MachinePrincipal("reports", frozenset({"admin", "user-activity.internal"}))


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

"""``pin-sessions token m2m`` and ``pin-sessions users grant|revoke``: called in process, but
for the first test, which runs the real program and uses the token it prints."""

from __future__ import annotations

import json
import subprocess
import uuid
from typing import Any

import httpx
import jwt

from pin_sessions.identity.clients import ServiceClients
from pin_sessions.platform.runtime import Runtime
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


async def _register(runtime: Runtime, name: str, *scopes: str) -> tuple[str, str]:
    """A service client as `clients create` registers it: its id and secret."""
    client, secret = await ServiceClients(runtime.database).create(
        name, scopes, runtime.clock.now()
    )
    return str(client.client_id), secret


async def test_token_m2m_mints_what_the_token_endpoint_gives_the_registered_client(
    settings_env: dict[str, str], http: httpx.AsyncClient, runtime: Runtime
) -> None:
    client_id, secret = await _register(runtime, "reports", "user-activity.internal", "admin")
    # The real program once, for its exit status and its streams; in process below.
    by_name = _run_process(
        "token", "m2m", "--client", "reports", "--scope", "user-activity.internal", "admin",
        env=settings_env,
    )  # fmt: skip
    assert by_name.returncode == 0, by_name.stderr
    answer = await http.post(
        "/oauth/token",
        data={"grant_type": "client_credentials", "scope": "admin user-activity.internal"},
        auth=(client_id, secret),
    )
    assert answer.status_code == 200, answer.text
    # Signed with the key the API publishes, as the token endpoint's tokens are.
    minted = await verified_claims(http, by_name.stdout.strip(), audience="pin-internal")
    endpoint = await verified_claims(http, answer.json()["access_token"], audience="pin-internal")
    # The same claims, with the same values but for the token's own id and times.
    assert minted.keys() == endpoint.keys()
    for_this_token = {"jti", "iat", "exp"}
    assert {k: v for k, v in minted.items() if k not in for_this_token} == {
        k: v for k, v in endpoint.items() if k not in for_this_token
    }
    assert (minted["sub"], minted["client_id"]) == (client_id, client_id)
    assert minted["scope"] == "admin user-activity.internal"
    assert minted["exp"] - minted["iat"] == endpoint["exp"] - endpoint["iat"] == 15 * 60
    assert "sid" not in minted

    # By id, and without --scope: all of the client's scopes, as the endpoint does.
    by_id = _run("token", "m2m", "--client", client_id, env=settings_env)
    assert by_id.returncode == 0, by_id.stderr
    assert _claims(by_id.stdout.strip())["scope"] == "admin user-activity.internal"


async def test_token_m2m_refuses_unregistered_clients_and_scopes_not_theirs(
    settings_env: dict[str, str], http: httpx.AsyncClient, runtime: Runtime
) -> None:
    client_id, _ = await _register(runtime, "crm", "user-activity.internal")
    retired, _ = await _register(runtime, "retired", "admin")
    await ServiceClients(runtime.database).disable(uuid.UUID(retired), runtime.clock.now())
    for args, said in (
        (("--client", "x", "--scope", "admin"), "no service client has the id or name 'x'"),
        (("--client", "crm", "--scope", "admin"), "the client may not hold admin"),
        (("--client", client_id, "--scope", "admin"), "the client may not hold admin"),
        (("--client", "retired"), "is disabled"),
    ):
        refused = _run("token", "m2m", *args, env=settings_env)
        assert refused.returncode == 1, (args, refused.stderr)
        assert refused.stdout == ""
        assert said in refused.stderr, refused.stderr
        assert "Traceback" not in refused.stderr


def test_a_scope_outside_the_catalogue_is_a_usage_error_naming_the_scopes(
    settings_env: dict[str, str],
) -> None:
    """A typo would otherwise be registered, and issued by /oauth/token, granting nothing."""
    for command in (
        ("clients", "create", "--name", "crm", "--scope", "nonsense"),
        ("clients", "create", "--name", "crm", "--scope", "admin", "user-activity.internl"),
        ("token", "m2m", "--client", "crm", "--scope", "nonsense"),
    ):
        refused = _run(*command, env=settings_env)
        assert refused.returncode == 2, (command, refused.stderr)
        assert refused.stdout == ""
        assert "argument --scope:" in refused.stderr, refused.stderr
        assert "the scopes are admin, user-activity.internal" in refused.stderr
    listed = _run("clients", "list", env=settings_env)
    assert json.loads(listed.stdout) == {"clients": []}


def test_clients_scopes_lists_the_catalogue(settings_env: dict[str, str]) -> None:
    listed = _run("clients", "scopes", env=settings_env)
    assert listed.returncode == 0, listed.stderr
    scopes = json.loads(listed.stdout)["scopes"]
    assert [scope["name"] for scope in scopes] == ["user-activity.internal", "admin"]
    assert all(scope["description"] for scope in scopes)


def test_a_client_name_is_taken_once(settings_env: dict[str, str]) -> None:
    """Two clients named crm would leave `token m2m --client crm` unable to choose."""
    first = _run("clients", "create", "--name", "crm", "--scope", "admin", env=settings_env)
    assert first.returncode == 0, first.stderr
    client_id = json.loads(first.stdout)["clientId"]
    assert _run("clients", "disable", client_id, env=settings_env).returncode == 0
    # Taken also by a disabled client: the name still reads as that client in `clients list`.
    second = _run("clients", "create", "--name", "crm", "--scope", "admin", env=settings_env)
    assert second.returncode == 1
    assert second.stdout == ""
    assert second.stderr == "pin-sessions: a service client is already named 'crm'\n"
    listed = json.loads(_run("clients", "list", env=settings_env).stdout)["clients"]
    assert [client["clientId"] for client in listed] == [client_id]


def test_token_m2m_is_refused_in_prod(settings_env: dict[str, str]) -> None:
    """SPEC §2: a development convenience; services use POST /oauth/token."""
    env = {**settings_env, "PIN_ENV": "prod"}
    del env["PIN_DEV_CODES"]  # refused in prod on its own
    result = _run("token", "m2m", "--client", "reports", "--scope", "admin", env=env)
    assert result.returncode == 2
    assert result.stdout == ""
    assert "refused when PIN_ENV=prod" in result.stderr


async def test_token_m2m_takes_scopes_from_every_scope_option(
    settings_env: dict[str, str], runtime: Runtime
) -> None:
    await _register(runtime, "reports", "user-activity.internal", "admin")
    result = _run(
        "token", "m2m", "--client", "reports", "--scope", "user-activity.internal",
        "--scope", "admin", env=settings_env,
    )  # fmt: skip
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


def test_a_permission_outside_the_catalogue_is_a_usage_error_naming_the_permissions(
    settings_env: dict[str, str],
) -> None:
    """A typo would otherwise be granted (or withdrawn) and change nothing the user can do."""
    phone = new_phone()
    for action in ("grant", "revoke"):
        refused = _run(
            "users", action, "--phone", phone, "--permission", "dev-stats.vieww", env=settings_env
        )
        assert refused.returncode == 2, refused.stderr
        assert refused.stdout == ""
        assert "argument --permission: 'dev-stats.vieww' is not a permission" in refused.stderr
        assert (
            "the permissions are dev-stats.view, user-activity.history.view-by-user"
            in refused.stderr
        )
    # Nothing was written: no user was provisioned for the phone.
    assert _run("users", "export", "--phone", phone, env=settings_env).returncode == 1


def test_users_permissions_lists_the_catalogue(settings_env: dict[str, str]) -> None:
    listed = _run("users", "permissions", env=settings_env)
    assert listed.returncode == 0, listed.stderr
    permissions = json.loads(listed.stdout)["permissions"]
    assert [permission["name"] for permission in permissions] == ["dev-stats.view", MANAGER]
    assert all(permission["description"] for permission in permissions)

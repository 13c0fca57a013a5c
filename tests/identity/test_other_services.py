"""Other services' view, with libraries nobody here wrote, over real HTTP (SPEC §8).

PyJWT's ``PyJWKClient`` fetches the JWKS and verifies a real access token and a real m2m
token, checking ``iss`` and ``aud``; Authlib's httpx OAuth2 client gets a token by the
client-credentials grant and calls an internal route with it. These libraries judge
expiry by the wall clock, so the server's clock starts at the real time here.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime

import httpx
import jwt
import pytest
from authlib.integrations.httpx_client import OAuth2Client

from pin_sessions.platform.clock import FixedClock
from pin_sessions.settings import DEFAULT_PUBLIC_URL
from tests.support.cli import Ran, run_cli

INTERNAL = "user-activity.internal"


@pytest.fixture
def clock() -> FixedClock:
    return FixedClock(datetime.now(UTC))


def _cli(*args: str, env: dict[str, str]) -> Ran:
    return run_cli(*args, env=env)


def _register(env: dict[str, str], *scopes: str) -> dict[str, str]:
    created = _cli("clients", "create", "--name", "crm", "--scope", *scopes, env=env)
    assert created.returncode == 0, created.stderr
    client: dict[str, str] = json.loads(created.stdout)
    return client


def _user_access_token(api_url: str) -> str:
    with httpx.Client(base_url=api_url) as http:
        phone = "+4479" + str(uuid.uuid4().int % 10**8).zfill(8)
        request = http.post("/api/identity/sign-in/requests", json={"phoneNumber": phone})
        request_id = request.json()["requestId"]
        code = http.get(f"/dev/sign-in-codes/{request_id}").json()["code"]
        confirmed = http.post(
            "/api/identity/sign-in/confirm", json={"requestId": request_id, "code": code}
        )
        assert confirmed.status_code == 200, confirmed.text
        token: str = confirmed.json()["accessToken"]
        return token


def test_pyjwkclient_verifies_access_and_m2m_tokens_with_the_published_keys(
    api_url: str, settings_env: dict[str, str]
) -> None:
    client = _register(settings_env, INTERNAL)
    granted = httpx.post(
        f"{api_url}/oauth/token",
        data={"grant_type": "client_credentials"},
        auth=(client["clientId"], client["clientSecret"]),
    )
    assert granted.status_code == 200, granted.text
    m2m_token = granted.json()["access_token"]
    access_token = _user_access_token(api_url)

    jwks = jwt.PyJWKClient(f"{api_url}/.well-known/jwks.json")
    user = jwt.decode(
        access_token,
        jwks.get_signing_key_from_jwt(access_token).key,
        algorithms=["ES256"],
        audience="pin-api",
        issuer=DEFAULT_PUBLIC_URL,
    )
    service = jwt.decode(
        m2m_token,
        jwks.get_signing_key_from_jwt(m2m_token).key,
        algorithms=["ES256"],
        audience="pin-internal",
        issuer=DEFAULT_PUBLIC_URL,
    )
    assert "sid" in user and user["aud"] == "pin-api"
    assert service["client_id"] == client["clientId"] and service["scope"] == INTERNAL
    # Each audience is its own: a user token is no service's, nor the reverse.
    for token, wrong in ((access_token, "pin-internal"), (m2m_token, "pin-api")):
        with pytest.raises(jwt.InvalidAudienceError):
            jwt.decode(
                token,
                jwks.get_signing_key_from_jwt(token).key,
                algorithms=["ES256"],
                audience=wrong,
                issuer=DEFAULT_PUBLIC_URL,
            )
    with pytest.raises(jwt.InvalidIssuerError):
        jwt.decode(
            m2m_token,
            jwks.get_signing_key_from_jwt(m2m_token).key,
            algorithms=["ES256"],
            audience="pin-internal",
            issuer="https://someone-else.example",
        )


def test_authlib_client_gets_a_token_and_calls_an_internal_route(
    api_url: str, settings_env: dict[str, str]
) -> None:
    client = _register(settings_env, INTERNAL, "admin")
    metadata = httpx.get(f"{api_url}/.well-known/oauth-authorization-server").json()
    token_path = metadata["token_endpoint"].removeprefix(metadata["issuer"])
    anonymous_id = httpx.post(f"{api_url}/api/user-activity/sessions/start").json()["anonymousId"]
    with OAuth2Client(
        client["clientId"], client["clientSecret"], scope=INTERNAL, base_url=api_url
    ) as oauth:
        token = oauth.fetch_token(f"{api_url}{token_path}", grant_type="client_credentials")
        assert token["scope"] == INTERNAL and token["token_type"] == "Bearer"
        linked = oauth.get(f"/internal/sessions/{anonymous_id}/link")
    assert linked.status_code == 200, linked.text
    assert linked.json() == {"anonymousId": anonymous_id, "userId": None, "linkedAt": None}


def test_the_clients_commands_register_rotate_and_disable(settings_env: dict[str, str]) -> None:
    client = _register(settings_env, INTERNAL)
    assert set(client) == {
        "clientId",
        "clientSecret",
        "name",
        "scopes",
        "status",
        "createdAt",
        "updatedAt",
    }
    listed = _cli("clients", "list", env=settings_env)
    [entry] = json.loads(listed.stdout)["clients"]
    assert entry["clientId"] == client["clientId"] and entry["status"] == "Active"
    assert client["clientSecret"] not in listed.stdout
    rotated = json.loads(
        _cli("clients", "rotate-secret", client["clientId"], env=settings_env).stdout
    )
    assert rotated["clientSecret"] != client["clientSecret"]
    disabled = _cli("clients", "disable", client["clientId"], env=settings_env)
    assert json.loads(disabled.stdout) == {
        "clientId": client["clientId"],
        "status": "Disabled",
        "changed": True,
    }
    again = _cli("clients", "rotate-secret", client["clientId"], env=settings_env)
    assert (again.returncode, again.stderr.strip()) == (
        1,
        "pin-sessions: The service client is disabled",
    )
    unknown = _cli("clients", "disable", str(uuid.uuid4()), env=settings_env)
    assert unknown.returncode == 1
    for bad in (
        ("clients", "disable", "'; drop table identity.clients; --"),
        ("clients", "create", "--name", "x", "--scope", "Not A Scope"),
        ("clients", "create", "--name", "", "--scope", INTERNAL),
    ):
        assert _cli(*bad, env=settings_env).returncode == 2

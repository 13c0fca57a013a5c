"""The client-credentials grant, introspection and the metadata (SPEC §8, RFC 6749/7662/8414)."""

from __future__ import annotations

import asyncio
import base64
import uuid
from datetime import timedelta
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry

from pin_sessions.identity.clients import ServiceClients
from pin_sessions.platform.clock import FixedClock
from pin_sessions.platform.ids import new_id
from pin_sessions.platform.runtime import Runtime
from tests.conftest import LogCapture
from tests.identity.flows import bearer, sign_in
from tests.support.tokens import Tokens, verified_claims
from tests.support.waiting import wait_until

TOKEN = "/oauth/token"
INTROSPECT = "/oauth/introspect"
INTERNAL = "user-activity.internal"
ADMIN = "admin"
FORM = {"Content-Type": "application/x-www-form-urlencoded"}


class Registered:
    """A registered client: its id and its secret."""

    def __init__(self, client_id: uuid.UUID, secret: str) -> None:
        self.client_id = str(client_id)
        self.secret = secret

    @property
    def basic(self) -> dict[str, str]:
        pair = f"{self.client_id}:{self.secret}".encode()
        return {"Authorization": "Basic " + base64.b64encode(pair).decode()}

    def form(self, **fields: str) -> dict[str, str]:
        return {"client_id": self.client_id, "client_secret": self.secret, **fields}


@pytest.fixture
async def client(runtime: Runtime) -> Registered:
    created, secret = await ServiceClients(runtime.database).create(
        "reports", [INTERNAL, ADMIN], runtime.clock.now()
    )
    return Registered(created.client_id, secret)


def _internal(anonymous_id: uuid.UUID) -> str:
    return f"/internal/sessions/{anonymous_id}/link"


def _oauth_error(response: httpx.Response, status: int, error: str) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    assert response.headers["cache-control"] == "no-store"
    assert response.json()["error"] == error
    assert set(response.json()) == {"error", "error_description"}
    if status == 401:
        assert response.headers["www-authenticate"].startswith("Basic ")


async def test_a_client_gets_a_token_with_basic_auth_and_calls_an_internal_route(
    http: httpx.AsyncClient, client: Registered
) -> None:
    response = await http.post(
        TOKEN, data={"grant_type": "client_credentials"}, headers=client.basic
    )
    assert response.status_code == 200, response.text
    assert response.headers["cache-control"] == "no-store"
    grant = response.json()
    assert set(grant) == {"access_token", "token_type", "expires_in", "scope"}
    assert (grant["token_type"], grant["expires_in"]) == ("Bearer", 900)
    assert grant["scope"] == f"{ADMIN} {INTERNAL}"
    claims = await verified_claims(http, grant["access_token"], audience="pin-internal")
    assert claims["sub"] == claims["client_id"] == client.client_id
    assert {"jti", "iat", "exp"} <= set(claims) and "sid" not in claims
    called = await http.get(
        _internal(new_id()), headers={"Authorization": f"Bearer {grant['access_token']}"}
    )
    assert called.status_code == 404  # authenticated and allowed: the device is unknown


async def test_form_authentication_and_a_narrower_scope(
    http: httpx.AsyncClient, client: Registered
) -> None:
    response = await http.post(
        TOKEN, data=client.form(grant_type="client_credentials", scope=ADMIN)
    )
    assert response.status_code == 200, response.text
    assert response.json()["scope"] == ADMIN
    token = {"Authorization": f"Bearer {response.json()['access_token']}"}
    # admin opens the users route only, not the link route.
    assert (await http.get(_internal(new_id()), headers=token)).status_code == 403


@pytest.mark.parametrize(
    ("body", "content_type", "error"),
    [
        ("grant_type=client_credentials", "application/json", "invalid_request"),
        ('{"grant_type": "client_credentials"}', "application/json", "invalid_request"),
        ("grant_type=client_credentials", None, "invalid_request"),
        (
            "grant_type=client_credentials&grant_type=password",
            FORM["Content-Type"],
            "invalid_request",
        ),
        ("grant_type=%ff%fe", FORM["Content-Type"], "invalid_request"),
        ("a=1&b=2&c=3&d=4&e=5&f=6&g=7&h=8&i=9", FORM["Content-Type"], "invalid_request"),
        ("scope=admin", FORM["Content-Type"], "invalid_request"),
        ("grant_type=", FORM["Content-Type"], "invalid_request"),
        (
            "grant_type=password&username=a&password=b",
            FORM["Content-Type"],
            "unsupported_grant_type",
        ),
        ("grant_type=authorization_code&code=x", FORM["Content-Type"], "unsupported_grant_type"),
        ("grant_type=client_credentials%00", FORM["Content-Type"], "unsupported_grant_type"),
    ],
)
async def test_malformed_forms_and_unknown_grants_are_clear_400s(
    http: httpx.AsyncClient, client: Registered, body: str, content_type: str | None, error: str
) -> None:
    headers = {**client.basic, **({"Content-Type": content_type} if content_type else {})}
    response = await http.post(TOKEN, content=body.encode("latin-1"), headers=headers)
    _oauth_error(response, 400, error)


@pytest.mark.parametrize(
    "scope", ["dev-stats.view", f"{ADMIN} dev-stats.view", "ADMIN", f"{ADMIN}  {INTERNAL}", "a\0b"]
)
async def test_a_scope_outside_the_clients_is_invalid_scope(
    http: httpx.AsyncClient, client: Registered, scope: str
) -> None:
    response = await http.post(
        TOKEN, data={"grant_type": "client_credentials", "scope": scope}, headers=client.basic
    )
    _oauth_error(response, 400, "invalid_scope")


async def test_a_scope_outside_the_catalogue_is_never_issued(
    http: httpx.AsyncClient, runtime: Runtime
) -> None:
    """A client registered before the catalogue was enforced may hold a typo (``nonsense``):
    its token carries only the catalogue's scopes, and asking for the typo is refused."""
    legacy, secret = await ServiceClients(runtime.database).create(
        "legacy", ["nonsense", ADMIN], runtime.clock.now()
    )
    headers = _basic(str(legacy.client_id), secret)
    granted = await http.post(TOKEN, data={"grant_type": "client_credentials"}, headers=headers)
    assert granted.status_code == 200, granted.text
    assert granted.json()["scope"] == ADMIN
    claims = await verified_claims(http, granted.json()["access_token"], audience="pin-internal")
    assert claims["scope"] == ADMIN
    asked = await http.post(
        TOKEN, data={"grant_type": "client_credentials", "scope": "nonsense"}, headers=headers
    )
    _oauth_error(asked, 400, "invalid_scope")
    assert "admin, user-activity.internal" in asked.json()["error_description"]

    typo_only, secret = await ServiceClients(runtime.database).create(
        "typo-only", ["nonsense"], runtime.clock.now()
    )
    nothing = await http.post(
        TOKEN,
        data={"grant_type": "client_credentials"},
        headers=_basic(str(typo_only.client_id), secret),
    )
    _oauth_error(nothing, 400, "invalid_scope")


def _basic(client_id: str, secret: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{client_id}:{secret}".encode()).decode()}


@pytest.mark.parametrize(
    "credentials",
    [
        {},  # none at all
        {"client_id": "x"},
        {"client_id": "' or '1'='1' --", "client_secret": "x' or 1=1 --"},
        {"client_id": "0193e0c6-1c2a-7b3e-8c1d-2e4f6a8b0c1d\0", "client_secret": "x"},
        {"client_id": "\0", "client_secret": "\0"},
        {"client_id": str(uuid.uuid4()), "client_secret": "no such client"},
    ],
)
async def test_bad_client_credentials_in_the_form_are_invalid_client(
    http: httpx.AsyncClient, credentials: dict[str, str]
) -> None:
    response = await http.post(TOKEN, data={"grant_type": "client_credentials", **credentials})
    _oauth_error(response, 401, "invalid_client")


@pytest.mark.parametrize(
    "authorization",
    [
        "Basic !!!not-base64!!!",
        "Basic " + base64.b64encode(b"no-colon").decode(),
        "Basic " + base64.b64encode(b"\xff\xfe:\xff").decode(),
        "Bearer eyJhbGciOiJub25lIn0.e30.",
        "Digest username=x",
    ],
)
async def test_malformed_authorization_headers_are_invalid_client(
    http: httpx.AsyncClient, authorization: str
) -> None:
    response = await http.post(
        TOKEN, data={"grant_type": "client_credentials"}, headers={"Authorization": authorization}
    )
    _oauth_error(response, 401, "invalid_client")


async def test_two_authentication_methods_at_once_are_refused(
    http: httpx.AsyncClient, client: Registered
) -> None:
    response = await http.post(
        TOKEN, data=client.form(grant_type="client_credentials"), headers=client.basic
    )
    _oauth_error(response, 400, "invalid_request")


async def test_a_wrong_secret_is_logged_without_the_secret(
    http: httpx.AsyncClient, client: Registered, captured_logs: LogCapture
) -> None:
    wrong = "the-wrong-secret-" + uuid.uuid4().hex
    response = await http.post(
        TOKEN, data={"grant_type": "client_credentials"}, headers=_basic(client.client_id, wrong)
    )
    _oauth_error(response, 401, "invalid_client")
    logged = [line for line in captured_logs.lines() if "client authentication failed" in line]
    assert any(client.client_id in line and "wrong secret" in line for line in logged)
    assert not any(wrong in line for line in captured_logs.lines())
    assert not any(client.secret in line for line in captured_logs.lines())


async def test_a_rotated_secret_replaces_the_old_one_at_once(
    http: httpx.AsyncClient, runtime: Runtime, client: Registered
) -> None:
    fresh = await ServiceClients(runtime.database).rotate_secret(
        uuid.UUID(client.client_id), runtime.clock.now()
    )
    old = await http.post(TOKEN, data=client.form(grant_type="client_credentials"))
    _oauth_error(old, 401, "invalid_client")
    new = await http.post(
        TOKEN, data={"grant_type": "client_credentials"}, headers=_basic(client.client_id, fresh)
    )
    assert new.status_code == 200


async def test_a_disabled_client_gets_no_token_and_its_tokens_are_refused_within_60_s(
    http: httpx.AsyncClient, runtime: Runtime, client: Registered, clock: FixedClock
) -> None:
    grant = (await http.post(TOKEN, data=client.form(grant_type="client_credentials"))).json()
    token = {"Authorization": f"Bearer {grant['access_token']}"}
    assert (await http.get(_internal(new_id()), headers=token)).status_code == 404
    assert await ServiceClients(runtime.database).disable(uuid.UUID(client.client_id), clock.now())
    refused = await http.post(TOKEN, data=client.form(grant_type="client_credentials"))
    _oauth_error(refused, 401, "invalid_client")
    # The copy of the disabled clients is read again once it is old enough (the token
    # itself lives 15 minutes), in the background: a tick later the token is refused.
    clock.advance(timedelta(seconds=60))
    answers: list[httpx.Response] = []

    async def token_refused() -> bool:
        answers.append(await http.get(_internal(new_id()), headers=token))
        return answers[-1].status_code == 401

    await wait_until(token_refused, timeout=10)
    assert answers[-1].json()["code"] == "AUTH_CLIENT_DISABLED"


async def test_introspection_calls_a_disabled_clients_token_inactive_at_once(
    http: httpx.AsyncClient, runtime: Runtime, client: Registered, clock: FixedClock
) -> None:
    """Introspection asks the table, not the internal routes' 30-second cache."""
    created, secret = await ServiceClients(runtime.database).create("audit", [ADMIN], clock.now())
    auditor = Registered(created.client_id, secret)
    grant = (await http.post(TOKEN, data=client.form(grant_type="client_credentials"))).json()
    assert (await _introspect(http, auditor, grant["access_token"]))["active"] is True
    assert await ServiceClients(runtime.database).disable(uuid.UUID(client.client_id), clock.now())
    assert await _introspect(http, auditor, grant["access_token"]) == {"active": False}


async def _introspect(http: httpx.AsyncClient, client: Registered, token: str) -> dict[str, Any]:
    response = await http.post(INTROSPECT, data={"token": token}, headers=client.basic)
    assert response.status_code == 200, response.text
    assert response.headers["cache-control"] == "no-store"
    answer: dict[str, Any] = response.json()
    return answer


async def test_introspection_describes_active_user_and_service_tokens(
    http: httpx.AsyncClient, client: Registered
) -> None:
    user = await sign_in(http)
    described = await _introspect(http, client, user["accessToken"])
    assert described["active"] is True
    assert (described["sub"], described["sid"], described["aud"]) == (
        user["userId"],
        user["sessionId"],
        "pin-api",
    )
    assert described["iss"] == "http://127.0.0.1:8000"
    # The sign-in that started the token's refresh family (SPEC §11), here the token's own.
    assert described["auth_time"] == described["iat"]
    grant = (await http.post(TOKEN, data=client.form(grant_type="client_credentials"))).json()
    service = await _introspect(http, client, grant["access_token"])
    assert service["active"] is True
    assert "auth_time" not in service  # no user signed in: a service's token
    assert (service["client_id"], service["scope"], service["aud"]) == (
        client.client_id,
        f"{ADMIN} {INTERNAL}",
        "pin-internal",
    )


async def test_introspection_says_inactive_and_nothing_more_for_dead_tokens(
    http: httpx.AsyncClient, runtime: Runtime, client: Registered, clock: FixedClock
) -> None:
    revoked = await sign_in(http)
    assert (
        await http.post("/api/identity/sessions/logout", headers=bearer(revoked))
    ).status_code == 204
    live = await sign_in(http)
    forged = await Tokens.of(runtime).forged_access(
        uuid.UUID(live["userId"]), uuid.UUID(live["sessionId"]), now=clock.now()
    )
    for dead in (revoked["accessToken"], forged, "garbage", "a.b.c"):
        assert await _introspect(http, client, dead) == {"active": False}
    assert (await _introspect(http, client, live["accessToken"]))["active"] is True
    clock.advance(timedelta(minutes=15))
    assert await _introspect(http, client, live["accessToken"]) == {"active": False}


async def test_introspection_needs_client_authentication_and_a_token(
    http: httpx.AsyncClient, client: Registered
) -> None:
    user = await sign_in(http)
    anonymous = await http.post(INTROSPECT, data={"token": user["accessToken"]})
    _oauth_error(anonymous, 401, "invalid_client")
    missing = await http.post(INTROSPECT, data={"token_type_hint": "x"}, headers=client.basic)
    _oauth_error(missing, 400, "invalid_request")


async def test_the_metadata_names_the_endpoints_under_the_public_url(
    http: httpx.AsyncClient,
) -> None:
    response = await http.get("/.well-known/oauth-authorization-server")
    assert response.status_code == 200
    assert response.headers["cache-control"] == "public, max-age=300"
    metadata = response.json()
    base = "http://127.0.0.1:8000"
    assert metadata["issuer"] == base
    assert metadata["token_endpoint"] == f"{base}/oauth/token"
    assert metadata["jwks_uri"] == f"{base}/.well-known/jwks.json"
    assert metadata["introspection_endpoint"] == f"{base}/oauth/introspect"
    assert metadata["grant_types_supported"] == ["client_credentials"]


async def test_the_jwks_is_publicly_cacheable_and_holds_public_halves_only(
    http: httpx.AsyncClient,
) -> None:
    await sign_in(http)
    response = await http.get("/.well-known/jwks.json")
    assert response.status_code == 200
    assert response.headers["cache-control"] == "public, max-age=300"
    [key] = response.json()["keys"]
    assert (key["kty"], key["crv"], key["alg"], key["use"]) == ("EC", "P-256", "ES256", "sig")
    assert "d" not in key


async def test_a_jwks_request_storm_is_answered_from_the_cache(
    http: httpx.AsyncClient, registry: CollectorRegistry
) -> None:
    await sign_in(http)
    first = await http.get("/.well-known/jwks.json")
    loads = registry.get_sample_value("pin_auth_key_set_loads_total")
    answers = await asyncio.gather(*(http.get("/.well-known/jwks.json") for _ in range(300)))
    assert {answer.status_code for answer in answers} == {200}
    assert {answer.content for answer in answers} == {first.content}
    assert registry.get_sample_value("pin_auth_key_set_loads_total") == loads

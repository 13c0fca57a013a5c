"""The HTTP surface other services code against: every SPEC §4 route, documented and served."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest

from pin_sessions.bootstrap.api import build_api
from pin_sessions.bootstrap.database import build_runtime
from pin_sessions.settings import load_settings
from tests.support.http import in_process
from tests.support.sms_gateways import CONFIGURED_GATEWAY

SPEC_ROUTES = [
    ("post", "/api/identity/sign-in/requests"),
    ("post", "/api/identity/sign-in/confirm"),
    ("post", "/api/identity/sessions/refresh"),
    ("get", "/api/identity/sessions"),
    ("post", "/api/identity/sessions/logout"),
    ("delete", "/api/identity/sessions/{sessionId}"),
    ("delete", "/api/identity/sessions"),
    ("post", "/api/user-activity/sessions/start"),
    ("post", "/api/user-activity/sessions/heartbeat"),
    ("post", "/api/user-activity/sessions/link"),
    ("get", "/api/user-activity/sessions"),
    ("post", "/api/user-activity/actions"),
    ("post", "/api/user-activity/property-views"),
    ("post", "/api/user-activity/property-views/{viewId}/end"),
    ("get", "/api/user-activity/users/{userId}/sessions"),
    ("get", "/internal/sessions/{anonymousId}/link"),
    ("get", "/internal/users/{userId}/sessions"),
    ("get", "/api/dev-stats/sessions/summary"),
    ("get", "/healthz"),
    ("get", "/readyz"),
    ("get", "/metrics"),
    ("post", "/oauth/token"),
    ("post", "/oauth/introspect"),
    ("get", "/.well-known/jwks.json"),
    ("get", "/.well-known/oauth-authorization-server"),
]


@pytest.fixture
async def openapi_paths(http: httpx.AsyncClient) -> dict[str, dict[str, object]]:
    response = await http.get("/openapi.json")
    assert response.status_code == 200, response.text
    paths: dict[str, dict[str, object]] = response.json()["paths"]
    return paths


@pytest.mark.parametrize(("method", "path"), SPEC_ROUTES)
async def test_every_spec_route_is_in_the_openapi_document(
    openapi_paths: dict[str, dict[str, object]], method: str, path: str
) -> None:
    assert path in openapi_paths, sorted(openapi_paths)
    assert method in openapi_paths[path]


async def test_docs_page_is_served_for_the_whole_api(http: httpx.AsyncClient) -> None:
    response = await http.get("/docs")
    assert response.status_code == 200


async def test_docs_load_nothing_from_another_host(http: httpx.AsyncClient) -> None:
    """/docs works offline: Swagger UI's script, style and icon come from this server."""
    page = (await http.get("/docs")).text
    referenced = re.findall(r"""(?:src|href|url)\s*[:=]\s*['"]([^'"]+)['"]""", page)
    assert {"/openapi.json", "/docs/assets/swagger-ui-bundle.js"} <= set(referenced)
    for url in referenced:
        assert url.startswith("/"), f"/docs loads {url}"
        assert (await http.get(url)).status_code == 200, url


# What each route answers besides its success (SPEC §4): 503 wherever the database is
# asked, 413 wherever a body is read, 401 and 400 (a second Authorization header, SPEC §11)
# wherever a Bearer token is read.
DECLARED_ERRORS = {
    ("post", "/api/identity/sign-in/requests"): {400, 413, 422, 429, 503},
    ("post", "/api/identity/sign-in/confirm"): {400, 404, 409, 410, 413, 422, 429, 503},
    ("post", "/api/identity/sessions/refresh"): {400, 401, 413, 422, 503},
    ("get", "/api/identity/sessions"): {400, 401, 503},
    ("post", "/api/identity/sessions/logout"): {400, 401, 413, 422, 503},
    ("delete", "/api/identity/sessions/{sessionId}"): {400, 401, 404, 413, 422, 503},
    ("delete", "/api/identity/sessions"): {400, 401, 413, 422, 503},
    ("get", "/api/identity/me/export"): {400, 401, 404, 503},
    ("delete", "/api/identity/me"): {400, 401, 413, 422, 503},
    ("get", "/api/user-activity/me/export"): {400, 401, 404, 503},
    ("post", "/api/user-activity/sessions/start"): {400, 401, 413, 422, 503},
    ("post", "/api/user-activity/sessions/heartbeat"): {400, 401, 413, 422, 503},
    ("post", "/api/user-activity/sessions/link"): {400, 401, 409, 413, 422, 503},
    ("get", "/api/user-activity/sessions"): {400, 401, 503},
    ("post", "/api/user-activity/actions"): {400, 401, 413, 422, 503},
    ("post", "/api/user-activity/property-views"): {400, 401, 413, 422, 503},
    ("post", "/api/user-activity/property-views/{viewId}/end"): {400, 401, 404, 413, 422, 503},
    ("get", "/api/user-activity/users/{userId}/sessions"): {400, 401, 403, 422, 503},
    ("get", "/api/user-activity/sessions/open-count"): {400, 401, 403, 503},
    ("get", "/internal/sessions/{anonymousId}/link"): {400, 401, 403, 404, 503},
    ("get", "/internal/users/{userId}/sessions"): {400, 401, 403, 422, 503},
    ("get", "/api/dev-stats/sessions/summary"): {400, 401, 403, 503},
    ("get", "/healthz"): set(),
    ("get", "/readyz"): {503},
    ("get", "/metrics"): set(),
    ("get", "/dev/sign-in-codes/{requestId}"): {404, 422, 503},
    ("post", "/oauth/token"): {400, 401, 413, 429, 503},
    ("post", "/oauth/introspect"): {400, 401, 413, 429, 503},
    ("get", "/.well-known/jwks.json"): {503},
    ("get", "/.well-known/oauth-authorization-server"): {503},
    ("post", "/dev/dev-stats/viewers"): {400, 413, 422, 503},
}
ANONYMOUS_ID_READERS = {
    ("post", "/api/identity/sign-in/confirm"): False,
    ("post", "/api/user-activity/sessions/start"): False,
    ("post", "/api/user-activity/sessions/heartbeat"): True,
    ("post", "/api/user-activity/sessions/link"): True,
    ("get", "/api/user-activity/sessions"): False,
    ("post", "/api/user-activity/actions"): True,
    ("post", "/api/user-activity/property-views"): True,
    ("post", "/api/user-activity/property-views/{viewId}/end"): True,
}
PROBLEM_SCHEMA = ("application/problem+json", {"$ref": "#/components/schemas/Problem"})
# SPEC §8: the OAuth endpoints answer their own errors in RFC 6749 §5.2's JSON (and their
# 429 past the failure limit of SPEC §11 alike).
OAUTH_ROUTES = {("post", "/oauth/token"), ("post", "/oauth/introspect")}
OAUTH_ERROR_CONTENT = {
    "application/json": {"schema": {"$ref": "#/components/schemas/OAuthErrorOut"}}
}


@pytest.fixture
def document(settings_env: dict[str, str], database_url: str) -> dict[str, Any]:
    """The document of a development server, which mounts the /dev routes too."""
    settings = load_settings({**settings_env, "PIN_DEV_CODES": "1"})
    return build_api(build_runtime(settings, database_url)).openapi()


def _operations(document: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {
        (method, path): operation
        for path, operations in document["paths"].items()
        for method, operation in operations.items()
    }


def test_each_operation_declares_every_error_it_answers(document: dict[str, Any]) -> None:
    declared = {
        key: {int(status) for status in operation["responses"] if int(status) >= 400}
        for key, operation in _operations(document).items()
    }
    assert declared == DECLARED_ERRORS


def test_every_error_is_declared_as_the_one_problem_json_schema_oauth_errors_aside(
    document: dict[str, Any],
) -> None:
    for key, operation in _operations(document).items():
        for status, response in operation["responses"].items():
            if key in OAUTH_ROUTES and status in ("400", "401", "429"):
                assert response["content"] == OAUTH_ERROR_CONTENT, (key, status)
            elif int(status) >= 400:
                [(media_type, media)] = response["content"].items()
                assert (media_type, media["schema"]) == PROBLEM_SCHEMA, (key, status)
    schemas = document["components"]["schemas"]
    assert "HTTPValidationError" not in schemas
    assert {"type", "title", "status", "detail", "instance", "code"} <= set(
        schemas["Problem"]["required"]
    )


def test_401_promises_www_authenticate_and_429_promises_retry_after(
    document: dict[str, Any],
) -> None:
    promised = {"401": "WWW-Authenticate", "429": "Retry-After"}
    seen = set()
    for key, operation in _operations(document).items():
        for status, header in promised.items():
            if status in operation["responses"]:
                headers = operation["responses"][status]["headers"]
                assert headers[header]["required"] is True, (key, status)
                seen.add(status)
    assert seen == set(promised)


def test_x_anonymous_id_is_declared_wherever_it_is_read(document: dict[str, Any]) -> None:
    declared = {
        key: parameter["required"]
        for key, operation in _operations(document).items()
        for parameter in operation.get("parameters", [])
        if parameter["name"] == "X-Anonymous-Id"
    }
    assert declared == ANONYMOUS_ID_READERS
    operation = _operations(document)[("post", "/api/user-activity/sessions/heartbeat")]
    [header] = operation["parameters"]
    assert header["in"] == "header"
    assert header["schema"]["format"] == "uuid"


async def test_a_missing_required_anonymous_id_is_a_400_not_a_422(
    http: httpx.AsyncClient,
) -> None:
    response = await http.post("/api/user-activity/actions", json={"type": "click"}, headers={})
    assert response.status_code == 400
    assert response.json()["code"] == "USER_ACTIVITY_ANONYMOUS_ID_REQUIRED"


def test_limit_is_documented_as_an_integer_from_1_to_100(document: dict[str, Any]) -> None:
    for key, operation in _operations(document).items():
        for parameter in operation.get("parameters", []):
            if parameter["name"] == "limit":
                schema = parameter["schema"]
                assert schema["type"] == "integer", key
                assert (schema["minimum"], schema["maximum"]) == (1, 100), key


async def test_a_limit_out_of_range_stays_a_400(http: httpx.AsyncClient) -> None:
    response = await http.get(
        "/api/user-activity/sessions",
        params={"limit": "101"},
        headers={"X-Anonymous-Id": "0193e0c6-1c2a-7b3e-8c1d-2e4f6a8b0c1d"},
    )
    assert response.status_code == 400
    assert response.json()["code"] == "USER_ACTIVITY_LIMIT_INVALID"


async def test_the_development_routes_are_documented_only_where_they_are_mounted(
    document: dict[str, Any], openapi_paths: dict[str, dict[str, object]]
) -> None:
    development = {"/dev/sign-in-codes/{requestId}", "/dev/dev-stats/viewers"}
    assert development <= set(document["paths"])
    assert not development & set(openapi_paths)


USER: list[dict[str, list[str]]] = [{"bearer": []}]
GUEST_OR_USER: list[dict[str, list[str]]] = [{}, {"bearer": []}]
# Who may call each operation, as Swagger UI's Authorize uses it: user routes the bearer
# scheme (optional where a guest may call), internal routes the OAuth 2 scheme with their
# scopes (any one of them); no entry: no credentials.
SECURITY = {
    ("get", "/api/identity/sessions"): USER,
    ("post", "/api/identity/sessions/logout"): USER,
    ("delete", "/api/identity/sessions/{sessionId}"): USER,
    ("delete", "/api/identity/sessions"): USER,
    ("get", "/api/identity/me/export"): USER,
    ("delete", "/api/identity/me"): USER,
    ("get", "/api/user-activity/me/export"): USER,
    ("post", "/api/user-activity/sessions/start"): GUEST_OR_USER,
    ("post", "/api/user-activity/sessions/heartbeat"): GUEST_OR_USER,
    ("post", "/api/user-activity/sessions/link"): USER,
    ("get", "/api/user-activity/sessions"): GUEST_OR_USER,
    ("post", "/api/user-activity/actions"): GUEST_OR_USER,
    ("post", "/api/user-activity/property-views"): GUEST_OR_USER,
    ("post", "/api/user-activity/property-views/{viewId}/end"): GUEST_OR_USER,
    ("get", "/api/user-activity/users/{userId}/sessions"): USER,
    ("get", "/api/user-activity/sessions/open-count"): USER,
    ("get", "/api/dev-stats/sessions/summary"): USER,
    ("get", "/internal/sessions/{anonymousId}/link"): [{"oauth2": ["user-activity.internal"]}],
    ("get", "/internal/users/{userId}/sessions"): [
        {"oauth2": ["user-activity.internal"]},
        {"oauth2": ["admin"]},
    ],
}


def test_the_document_declares_bearer_and_client_credentials_and_each_operations_security(
    document: dict[str, Any],
) -> None:
    schemes = document["components"]["securitySchemes"]
    assert schemes["bearer"] | {"description": ""} == {
        "type": "http",
        "scheme": "bearer",
        "bearerFormat": "JWT",
        "description": "",
    }
    assert schemes["oauth2"]["type"] == "oauth2"
    [flow] = schemes["oauth2"]["flows"].items()
    assert flow[0] == "clientCredentials"
    assert flow[1]["tokenUrl"] == "/oauth/token"
    assert set(flow[1]["scopes"]) == {"user-activity.internal", "admin"}
    declared = {
        key: operation["security"]
        for key, operation in _operations(document).items()
        if "security" in operation
    }
    assert declared == SECURITY
    assert "security" not in document  # no global default: an operation says it or is open
    # Whatever reads a Bearer token says so: every 401 but the refresh token's and the
    # OAuth endpoints' (client authentication) belongs to a secured operation.
    for key, operation in _operations(document).items():
        if "401" in operation["responses"] and key not in OAUTH_ROUTES:
            assert key in SECURITY or key == ("post", "/api/identity/sessions/refresh"), key


# SPEC §11: in prod the API's clients see neither its map nor its metrics.
PROD_SURFACE = ("/docs", "/docs/assets/swagger-ui-bundle.js", "/openapi.json", "/metrics")


@pytest.mark.parametrize(
    ("environ", "served"),
    [
        ({}, set(PROD_SURFACE)),
        ({"PIN_ENV": "prod", **CONFIGURED_GATEWAY}, set()),
        (
            {"PIN_ENV": "prod", "PIN_HTTP__DOCS": "1", **CONFIGURED_GATEWAY},
            {"/docs", "/docs/assets/swagger-ui-bundle.js", "/openapi.json"},
        ),
        ({"PIN_HTTP__DOCS": "0"}, {"/metrics"}),
    ],
)
async def test_prod_serves_docs_only_when_asked_and_metrics_never_on_the_api_port(
    settings_env: dict[str, str], database_url: str, environ: dict[str, str], served: set[str]
) -> None:
    settings = load_settings({**settings_env, **environ})
    async with in_process(build_api(build_runtime(settings, database_url))) as http:
        statuses = {path: (await http.get(path)).status_code for path in PROD_SURFACE}
        assert (await http.get("/readyz")).status_code == 200
    assert {path for path, status in statuses.items() if status == 200} == served
    assert {status for path, status in statuses.items() if path not in served} <= {404}

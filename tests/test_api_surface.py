"""The HTTP surface other services code against: every SPEC §4 route, documented and served."""

from __future__ import annotations

import httpx
import pytest

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

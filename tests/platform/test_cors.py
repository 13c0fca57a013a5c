"""CORS as SPEC §8 scopes it: only the listed origins, only /api/** and /.well-known/**, over
real HTTP with the preflights a browser sends."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from pin_sessions.bootstrap.api import build_api
from pin_sessions.bootstrap.database import build_runtime
from pin_sessions.platform.clock import FixedClock
from pin_sessions.platform.ids import new_id
from pin_sessions.settings import SettingsError, load_settings
from tests.support.http import in_process

ALLOWED = "http://shop.example:8080"
OTHER = "http://elsewhere.example"
START = "/api/user-activity/sessions/start"
# Served ahead of the framework (platform.http.fast_path), inside the same request layers.
HEARTBEAT = "/api/user-activity/sessions/heartbeat"


@pytest.fixture
def settings_env(settings_env: dict[str, str]) -> dict[str, str]:
    return {**settings_env, "PIN_HTTP__CORS_ORIGINS": f"{ALLOWED}, https://app.example"}


@pytest.fixture
async def wire(api_url: str) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=api_url, timeout=30) as client:
        yield client


async def preflight(
    client: httpx.AsyncClient, path: str, origin: str, method: str = "POST"
) -> httpx.Response:
    return await client.options(
        path,
        headers={
            "Origin": origin,
            "Access-Control-Request-Method": method,
            "Access-Control-Request-Headers": "content-type,x-anonymous-id,idempotency-key",
        },
    )


@pytest.mark.parametrize("path", [START, "/api/user-activity/actions", "/.well-known/jwks.json"])
async def test_a_preflight_from_a_listed_origin_to_the_api_is_allowed_and_cached_10_minutes(
    wire: httpx.AsyncClient, path: str
) -> None:
    response = await preflight(wire, path, ALLOWED)
    assert response.status_code == 204
    assert response.headers["access-control-allow-origin"] == ALLOWED
    assert response.headers["access-control-max-age"] == "600"
    allowed = {
        h.strip().lower() for h in response.headers["access-control-allow-headers"].split(",")
    }
    assert allowed == {"authorization", "content-type", "x-anonymous-id", "idempotency-key"}
    assert "POST" in response.headers["access-control-allow-methods"]
    assert "access-control-allow-credentials" not in response.headers
    assert "Origin" in response.headers["vary"]


@pytest.mark.parametrize(
    "path",
    [
        "/internal/sessions/00000000-0000-4000-8000-000000000001/link",
        "/dev/dev-stats/viewers",
        "/oauth/token",
        "/metrics",
        "/demo",
    ],
)
async def test_paths_outside_api_and_well_known_never_answer_another_origin(
    wire: httpx.AsyncClient, path: str
) -> None:
    response = await preflight(wire, path, ALLOWED)
    assert response.status_code != 204
    assert "access-control-allow-origin" not in response.headers
    simple = await wire.get(path, headers={"Origin": ALLOWED})
    assert "access-control-allow-origin" not in simple.headers


async def test_an_origin_not_listed_gets_no_cors_answer(wire: httpx.AsyncClient) -> None:
    response = await preflight(wire, START, OTHER)
    assert "access-control-allow-origin" not in response.headers
    simple = await wire.post(START, headers={"Origin": OTHER})
    assert "access-control-allow-origin" not in simple.headers


async def test_answers_and_errors_on_the_api_are_readable_by_a_listed_origin(
    wire: httpx.AsyncClient,
) -> None:
    device = str(new_id())
    started = await wire.post(START, headers={"Origin": ALLOWED, "X-Anonymous-Id": device})
    refused = await wire.post(START, headers={"Origin": ALLOWED, "X-Anonymous-Id": "not-a-uuid"})
    keys = await wire.get("/.well-known/jwks.json", headers={"Origin": ALLOWED})
    beat = await wire.post(HEARTBEAT, headers={"Origin": ALLOWED, "X-Anonymous-Id": device})
    bad_beat = await wire.post(HEARTBEAT, headers={"Origin": ALLOWED, "X-Anonymous-Id": "x"})
    for response in (started, refused, keys, beat, bad_beat):
        assert response.headers["access-control-allow-origin"] == ALLOWED
        assert "Origin" in response.headers["vary"]
        exposed = response.headers["access-control-expose-headers"].lower()
        assert "retry-after" in exposed and "x-request-id" in exposed
    assert started.status_code == 200 and started.json()["anonymousId"] == device
    assert refused.status_code == bad_beat.status_code == 400
    assert beat.status_code == 200 and beat.json()["sessionId"] == started.json()["sessionId"]


async def test_without_origins_configured_the_api_is_same_origin_only(
    settings_env: dict[str, str], database_url: str, clock: FixedClock
) -> None:
    assert load_settings({}).http.cors_origins == ()
    settings = load_settings({**settings_env, "PIN_HTTP__CORS_ORIGINS": ""})
    assert settings.http.cors_origins == ()
    async with in_process(build_api(build_runtime(settings, database_url, clock=clock))) as client:
        response = await preflight(client, START, ALLOWED)
        simple = await client.post(START, headers={"Origin": ALLOWED})
    assert response.status_code == 405
    for answer in (response, simple):
        assert "access-control-allow-origin" not in answer.headers


def test_origins_are_read_comma_separated_or_as_a_json_list() -> None:
    listed = load_settings({"PIN_HTTP__CORS_ORIGINS": f"{ALLOWED}, https://app.example"})
    as_json = load_settings({"PIN_HTTP__CORS_ORIGINS": f'["{ALLOWED}", "https://app.example"]'})
    assert listed.http.cors_origins == as_json.http.cors_origins == (ALLOWED, "https://app.example")


@pytest.mark.parametrize(
    "bad", ["https://app.example/", "app.example", "https://a.example/path", "*"]
)
def test_a_value_that_is_not_an_origin_stops_the_process_naming_the_variable(bad: str) -> None:
    with pytest.raises(SettingsError, match="PIN_HTTP__CORS_ORIGINS"):
        load_settings({"PIN_HTTP__CORS_ORIGINS": bad})

"""The pages and the tracker as the API serves them (plain HTTP, no browser)."""

from __future__ import annotations

import base64
import hashlib
import json
import re
from pathlib import Path

import httpx
import pytest
from playwright.async_api import BrowserContext

from pin_sessions.bootstrap.api import build_api
from pin_sessions.bootstrap.database import build_runtime
from pin_sessions.platform.clock import FixedClock
from pin_sessions.settings import load_settings
from pin_sessions.web.http import STATIC_FILES, static_bytes
from tests.support.http import LiveServer

ROOT = Path(__file__).parents[2]
CLIENT = ROOT / "clients" / "js"


@pytest.mark.parametrize("name", ["pin-tracker.js", "pin-tracker.iife.js"])
async def test_the_served_tracker_builds_are_the_packaged_ones_with_their_source_maps(
    http: httpx.AsyncClient, name: str
) -> None:
    response = await http.get(f"/static/{name}")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/javascript")
    assert response.content == static_bytes(name)
    assert response.content.rstrip().endswith(f"//# sourceMappingURL={name}.map".encode())
    source_map = await http.get(f"/static/{name}.map")
    assert source_map.status_code == 200
    assert source_map.json()["sourcesContent"]


@pytest.mark.parametrize("path", ["/dev-stats", "/demo"])
async def test_pages_are_html_that_runs_only_same_origin_scripts(
    http: httpx.AsyncClient, path: str
) -> None:
    response = await http.get(path)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    policy = response.headers["content-security-policy"]
    assert "script-src 'self'" in policy
    assert "connect-src 'self'" in policy
    # Every script and stylesheet the page names is one the router serves.
    for name in STATIC_FILES:
        if f"/static/{name}" in response.text:
            assert (await http.get(f"/static/{name}")).status_code == 200


async def test_only_listed_static_files_are_served(http: httpx.AsyncClient) -> None:
    assert (await http.get("/static/..%2fhttp.py")).status_code == 404
    assert (await http.get("/static/__init__.py")).status_code == 404


async def test_the_dev_viewer_grant_exists_only_with_dev_codes(
    settings_env: dict[str, str], database_url: str, clock: FixedClock
) -> None:
    """Without PIN_DEV_CODES=1 (always so in prod) nobody can grant themselves the dashboard."""
    settings = load_settings({**settings_env, "PIN_DEV_CODES": "0"})
    with LiveServer(build_api(build_runtime(settings, database_url, clock=clock))) as url:
        async with httpx.AsyncClient(base_url=url) as client:
            body = {"phoneNumber": "+15550100100"}
            assert (await client.post("/dev/dev-stats/viewers", json=body)).status_code == 404
            assert (await client.get("/dev-stats")).status_code == 200


async def test_the_dev_viewer_grant_refuses_a_malformed_phone(http: httpx.AsyncClient) -> None:
    response = await http.post("/dev/dev-stats/viewers", json={"phoneNumber": "12345"})
    assert response.status_code == 422


async def test_the_api_docs_render_in_a_browser_from_this_server_alone(
    device: BrowserContext, api_url: str
) -> None:
    page = await device.new_page()
    requested: list[str] = []
    page.on("request", lambda request: requested.append(request.url))
    await page.goto("/docs")
    await page.wait_for_selector(".swagger-ui .info .title")
    assert "PIN Sessions" in (await page.text_content(".swagger-ui .info .title") or "")
    assert [url for url in requested if not url.startswith(api_url)] == []


async def test_the_script_tag_build_revalidates_by_etag_and_is_gzipped_on_request(
    http: httpx.AsyncClient,
) -> None:
    path = "/static/pin-tracker.iife.js"
    plain = await http.get(path, headers={"Accept-Encoding": "identity"})
    assert plain.status_code == 200
    assert "content-encoding" not in plain.headers
    assert plain.headers["cache-control"] == "no-cache"
    assert plain.headers["etag"].startswith('"')
    assert "accept-encoding" in plain.headers["vary"].lower()
    again = await http.get(
        path, headers={"Accept-Encoding": "identity", "If-None-Match": plain.headers["etag"]}
    )
    assert (again.status_code, again.content) == (304, b"")
    assert again.headers["etag"] == plain.headers["etag"]

    # httpx decodes the body: what crossed the wire is the gzip encoding of the same bytes.
    zipped = await http.get(path, headers={"Accept-Encoding": "gzip"})
    assert zipped.headers["content-encoding"] == "gzip"
    assert int(zipped.headers["content-length"]) < len(plain.content) / 2
    assert zipped.content == plain.content == static_bytes("pin-tracker.iife.js")
    assert zipped.headers["etag"] != plain.headers["etag"]
    revalidated = await http.get(
        path, headers={"Accept-Encoding": "gzip", "If-None-Match": zipped.headers["etag"]}
    )
    assert revalidated.status_code == 304


async def test_the_versioned_script_is_immutable_and_public_to_every_origin(
    http: httpx.AsyncClient,
) -> None:
    version = json.loads((CLIENT / "package.json").read_text())["version"]
    shop = {"Origin": "https://shop.example"}
    versioned = await http.get(f"/static/pin-tracker.{version}.iife.js", headers=shop)
    assert versioned.status_code == 200
    assert versioned.headers["cache-control"] == "public, max-age=31536000, immutable"
    assert versioned.content == static_bytes("pin-tracker.iife.js")
    assert (await http.get("/static/pin-tracker.0.0.1.iife.js")).status_code == 404
    # The tracker's scripts load from any site (a <script integrity crossorigin> needs
    # this); never with credentials, and nothing else under /static is opened so.
    for name in (f"pin-tracker.{version}.iife.js", "pin-tracker.iife.js", "pin-tracker.js"):
        response = await http.get(f"/static/{name}", headers=shop)
        assert response.headers["access-control-allow-origin"] == "*", name
        assert "access-control-allow-credentials" not in response.headers, name
    page_script = await http.get("/static/demo.js", headers=shop)
    assert "access-control-allow-origin" not in page_script.headers


def test_the_published_integrity_hashes_are_the_served_script_s() -> None:
    """Every versioned script tag in the docs names this version and its SRI hash."""
    version = json.loads((CLIENT / "package.json").read_text())["version"]
    served = static_bytes("pin-tracker.iife.js")
    expected = "sha384-" + base64.b64encode(hashlib.sha384(served).digest()).decode()
    tags = 0
    for doc in (ROOT / "README.md", CLIENT / "README.md", *sorted((ROOT / "docs").glob("*.md"))):
        for tag in re.findall(r"<script[^>]*pin-tracker\.[^>]*\.iife\.js[^>]*>", doc.read_text()):
            tags += 1
            assert f"pin-tracker.{version}.iife.js" in tag, (doc.name, tag)
            assert f'integrity="{expected}"' in tag, (doc.name, tag)
            assert 'crossorigin="anonymous"' in tag, (doc.name, tag)
    assert tags >= 2, "the READMEs publish the versioned script tag"

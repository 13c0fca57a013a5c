"""Routes serving the pages and scripts in ``static/`` (package data, read once, when first asked).

``/dev-stats`` is the dashboard over ``GET /api/dev-stats/sessions/summary``; ``/demo`` uses the
tracker so a developer can watch sessions appear. With ``PIN_DEV_CODES=1`` (never in prod) one
more route, ``POST /dev/dev-stats/viewers``, grants ``dev-stats.view`` to a phone number, so the
dashboard can sign a developer in with the dev sign-in codes and show data on ``up``'s defaults.

What a page may offer is rendered into it, never probed: ``<body data-dev-codes="true">`` where
the development codes are mounted (``services.PageFeatures``, which the composition root
builds), so a page makes no request that is meant to fail. The pages' icon is
``/static/favicon.svg``, also served as ``/favicon.ico`` for what a browser shows without a
page (a JSON answer opened in a tab).

Static files revalidate cheaply: each has an ``ETag`` (a matching ``If-None-Match`` gets a
304) and is sent gzip-encoded to a client that accepts it. The script-tag build is also served
at ``/static/pin-tracker.<version>.iife.js``, whose bytes never change, so it is cached for a
year (``immutable``) and pinned by an SRI hash in the docs. The tracker's scripts are public:
they carry ``Access-Control-Allow-Origin: *`` (never credentials), which a browser needs to
load a ``<script integrity crossorigin>`` from another origin; CORS for everything else is
``platform.http.cors``'s, on the API's paths only.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
from dataclasses import dataclass
from importlib import resources
from typing import Annotated

from fastapi import APIRouter, Depends, Request, Response, status
from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from pin_sessions.platform.errors import NotFound
from pin_sessions.platform.http.dependencies import Now
from pin_sessions.platform.http.openapi import problems
from pin_sessions.platform.permissions import DEV_STATS_VIEW
from pin_sessions.platform.phone_numbers import E164_PATTERN
from pin_sessions.web.services import PageFeatures, WebDep

# Name → media type of every file the router serves; nothing else under static/ is reachable.
STATIC_FILES = {
    # The tracker as clients/js builds it (an ES module and a script-tag build, with source
    # maps); tests/web/test_packaging.py proves these are the build of clients/js/src.
    "pin-tracker.js": "text/javascript; charset=utf-8",
    "pin-tracker.js.map": "application/json",
    "pin-tracker.iife.js": "text/javascript; charset=utf-8",
    "pin-tracker.iife.js.map": "application/json",
    "sign-in.js": "text/javascript; charset=utf-8",
    "dev-stats.js": "text/javascript; charset=utf-8",
    "charts.js": "text/javascript; charset=utf-8",
    "demo.js": "text/javascript; charset=utf-8",
    "pages.css": "text/css; charset=utf-8",
    "favicon.svg": "image/svg+xml",
}
FAVICON = "favicon.svg"
PAGES = {"/dev-stats": "dev-stats.html", "/demo": "demo.html"}
# The pages run only our own scripts and talk only to this origin.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
)
# Revalidate every time: a stale tracker in a developer's cache hides a fix. The ETag makes
# that a 304 when nothing changed.
CACHE_CONTROL = "no-cache"
# The versioned script's bytes are fixed by its name: cached for a year, never revalidated.
IMMUTABLE = "public, max-age=31536000, immutable"
SCRIPT_TAG_BUILD = "pin-tracker.iife.js"
# What other sites load (by <script> or import): readable by any origin, without credentials.
PUBLIC_SCRIPTS = frozenset(
    {"pin-tracker.js", "pin-tracker.js.map", SCRIPT_TAG_BUILD, "pin-tracker.iife.js.map"}
)


# The static pages carry this attribute; served, it says what the server offers.
DEV_CODES_OFF = b'data-dev-codes="false"'
DEV_CODES_ON = b'data-dev-codes="true"'


class DevViewerBody(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    phone_number: Annotated[str, Field(pattern=E164_PATTERN)]


@functools.cache
def static_bytes(name: str) -> bytes:
    """The packaged copy of one file under ``static/``."""
    return resources.files("pin_sessions.web").joinpath("static", name).read_bytes()


@functools.cache
def tracker_version() -> str:
    """The tracker's version, written beside its builds by ``npm run build:service``."""
    return static_bytes("pin-tracker.version").decode().strip()


def versioned_script_name() -> str:
    """The script-tag build's immutable name: ``pin-tracker.<version>.iife.js``."""
    return f"pin-tracker.{tracker_version()}.iife.js"


@dataclass(frozen=True)
class Encoded:
    """One representation of a static file: its bytes and their entity tag."""

    body: bytes
    etag: str


@functools.cache
def static_representations(name: str) -> tuple[Encoded, Encoded]:
    """The file as it is and gzip-encoded (``mtime=0``: the same bytes on every instance)."""
    body = static_bytes(name)
    digest = hashlib.sha256(body).hexdigest()[:32]
    return Encoded(body, f'"{digest}"'), Encoded(gzip.compress(body, mtime=0), f'"{digest}-gzip"')


def accepts_gzip(accept_encoding: str) -> bool:
    """Whether ``Accept-Encoding`` lists gzip (or ``*``) without refusing it by ``q=0``."""
    for part in accept_encoding.lower().split(","):
        coding, _, params = part.strip().partition(";")
        if coding.strip() in ("gzip", "*"):
            quality = params.strip().removeprefix("q=")
            return not params or quality.strip("0.") != ""
    return False


def etag_matches(if_none_match: str, etag: str) -> bool:
    """``If-None-Match`` by the weak comparison RFC 9110 prescribes for it."""
    tags = {tag.strip().removeprefix("W/") for tag in if_none_match.split(",")}
    return "*" in tags or etag in tags


@functools.cache
def page_bytes(name: str, features: PageFeatures) -> bytes:
    """A page as served: its static file with what this server offers filled in."""
    html = static_bytes(name)
    if DEV_CODES_OFF not in html:
        raise ValueError(f"{name} lacks {DEV_CODES_OFF.decode()} on its <body>")
    return html.replace(DEV_CODES_OFF, DEV_CODES_ON) if features.dev_codes else html


async def _features(services: WebDep) -> PageFeatures:
    return services.features


Features = Annotated[PageFeatures, Depends(_features)]

# Pages and scripts are not API operations, so the OpenAPI document leaves them out.
router = APIRouter(include_in_schema=False)
# Mounted only with PIN_DEV_CODES=1 (never in prod); documented whenever it is mounted.
dev_router = APIRouter(prefix="/dev", tags=["development"])

PAGE_HEADERS = {"Cache-Control": CACHE_CONTROL, "Content-Security-Policy": CONTENT_SECURITY_POLICY}


@router.get("/dev-stats")
async def dashboard(features: Features) -> Response:
    """The sessions dashboard."""
    return _page("/dev-stats", features)


@router.get("/demo")
async def demo(features: Features) -> Response:
    """The tracker demo."""
    return _page("/demo", features)


def _page(path: str, features: PageFeatures) -> Response:
    return Response(
        page_bytes(PAGES[path], features),
        media_type="text/html; charset=utf-8",
        headers=PAGE_HEADERS,
    )


@router.get("/favicon.ico")
async def favicon() -> Response:
    """The icon a browser asks for by itself (the pages name theirs)."""
    return Response(
        static_bytes(FAVICON),
        media_type=STATIC_FILES[FAVICON],
        headers={"Cache-Control": "public, max-age=86400"},
    )


@router.get("/static/{name}")
async def serve_static(name: str, request: Request) -> Response:
    immutable = name == versioned_script_name()
    file = SCRIPT_TAG_BUILD if immutable else name
    if file not in STATIC_FILES:
        raise NotFound(f"no static file {name!r}")
    plain, gzipped = static_representations(file)
    chosen = gzipped if accepts_gzip(request.headers.get("accept-encoding", "")) else plain
    headers = {
        "Cache-Control": IMMUTABLE if immutable else CACHE_CONTROL,
        "ETag": chosen.etag,
        "Vary": "Accept-Encoding",
    }
    if file in PUBLIC_SCRIPTS:
        headers["Access-Control-Allow-Origin"] = "*"
    if etag_matches(request.headers.get("if-none-match", ""), chosen.etag):
        return Response(status_code=status.HTTP_304_NOT_MODIFIED, headers=headers)
    if chosen is gzipped:
        headers["Content-Encoding"] = "gzip"
    return Response(chosen.body, media_type=STATIC_FILES[file], headers=headers)


@dev_router.post(
    "/dev-stats/viewers",
    status_code=status.HTTP_204_NO_CONTENT,
    responses=problems(400, 413, 422, 503),
)
async def grant_dev_viewer(body: DevViewerBody, services: WebDep, now: Now) -> Response:
    """Development only: let this phone's user read the dashboard after signing in."""
    await services.grants.grant_permissions(body.phone_number, [DEV_STATS_VIEW], now)
    return Response(status_code=status.HTTP_204_NO_CONTENT)

"""Routes serving the pages and scripts in ``static/`` (package data, read once, when first asked).

``/dev-stats`` is the dashboard over ``GET /api/dev-stats/sessions/summary``; ``/demo`` uses the
tracker so a developer can watch sessions appear. With ``PIN_DEV_CODES=1`` (never in prod) one
more route, ``POST /dev/dev-stats/viewers``, grants ``dev-stats.view`` to a phone number, so the
dashboard can sign a developer in with the dev sign-in codes and show data on ``up``'s defaults.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Iterable
from datetime import datetime
from importlib import resources
from typing import Annotated, Protocol, runtime_checkable

from fastapi import APIRouter, Depends, Request, Response, status
from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from pin_sessions.platform.errors import NotFound
from pin_sessions.platform.http.dependencies import Now, state
from pin_sessions.platform.http.openapi import problems
from pin_sessions.platform.permissions import DEV_STATS_VIEW
from pin_sessions.platform.phone_numbers import E164_PATTERN

# Name → media type of every file the router serves; nothing else under static/ is reachable.
STATIC_FILES = {
    "pin-tracker.js": "text/javascript; charset=utf-8",
    "sign-in.js": "text/javascript; charset=utf-8",
    "dev-stats.js": "text/javascript; charset=utf-8",
    "charts.js": "text/javascript; charset=utf-8",
    "demo.js": "text/javascript; charset=utf-8",
    "pages.css": "text/css; charset=utf-8",
}
PAGES = {"/dev-stats": "dev-stats.html", "/demo": "demo.html"}
# The pages run only our own scripts and talk only to this origin.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
)
# Revalidate every time: a stale tracker in a developer's cache hides a fix.
CACHE_CONTROL = "no-cache"


@runtime_checkable
class PermissionGrants(Protocol):
    """What identity offers operators: the composition root's ``app.state.identity``."""

    async def grant_permissions(
        self, phone_number: str, permissions: Iterable[str], now: datetime
    ) -> uuid.UUID: ...


class DevViewerBody(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    phone_number: Annotated[str, Field(pattern=E164_PATTERN)]


@functools.cache
def static_bytes(name: str) -> bytes:
    """The packaged copy of one file under ``static/``."""
    return resources.files("pin_sessions.web").joinpath("static", name).read_bytes()


# Pages and scripts are not API operations, so the OpenAPI document leaves them out.
router = APIRouter(include_in_schema=False)
# Mounted only with PIN_DEV_CODES=1 (never in prod); documented whenever it is mounted.
dev_router = APIRouter(prefix="/dev", tags=["development"])

PAGE_HEADERS = {"Cache-Control": CACHE_CONTROL, "Content-Security-Policy": CONTENT_SECURITY_POLICY}


@router.get("/dev-stats")
async def dashboard() -> Response:
    """The sessions dashboard."""
    return Response(
        static_bytes(PAGES["/dev-stats"]),
        media_type="text/html; charset=utf-8",
        headers=PAGE_HEADERS,
    )


@router.get("/demo")
async def demo() -> Response:
    """The tracker demo."""
    return Response(
        static_bytes(PAGES["/demo"]), media_type="text/html; charset=utf-8", headers=PAGE_HEADERS
    )


@router.get("/static/{name}")
async def serve_static(name: str) -> Response:
    if name not in STATIC_FILES:
        raise NotFound(f"no static file {name!r}")
    return Response(
        static_bytes(name), media_type=STATIC_FILES[name], headers={"Cache-Control": CACHE_CONTROL}
    )


async def _grants(request: Request) -> PermissionGrants:
    return state(request, "identity", PermissionGrants)  # type: ignore[type-abstract]


@dev_router.post(
    "/dev-stats/viewers",
    status_code=status.HTTP_204_NO_CONTENT,
    responses=problems(400, 413, 422, 503),
)
async def grant_dev_viewer(
    body: DevViewerBody,
    grants: Annotated[PermissionGrants, Depends(_grants)],
    now: Now,
) -> Response:
    """Development only: let this phone's user read the dashboard after signing in."""
    await grants.grant_permissions(body.phone_number, [DEV_STATS_VIEW], now)
    return Response(status_code=status.HTTP_204_NO_CONTENT)

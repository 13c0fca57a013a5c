"""Routes serving the pages and scripts in ``static/`` (package data, read once at build time).

``/dev-stats`` is the dashboard over ``GET /api/dev-stats/sessions/summary``; ``/demo`` uses the
tracker so a developer can watch sessions appear. With ``PIN_DEV_CODES=1`` (never in prod) one
more route, ``POST /dev/dev-stats/viewers``, grants ``dev-stats.view`` to a phone number, so the
dashboard can sign a developer in with the dev sign-in codes and show data on ``up``'s defaults.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from datetime import datetime
from importlib import resources
from typing import Annotated, Protocol

from fastapi import APIRouter, Response, status
from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from pin_sessions.platform.clock import Clock
from pin_sessions.platform.errors import NotFound
from pin_sessions.platform.http.openapi import problems

DEV_STATS_PERMISSION = "dev-stats.view"
E164_PATTERN = r"^\+[1-9][0-9]{6,14}$"

# Name → media type of every file the router serves; nothing else under static/ is reachable.
STATIC_FILES = {
    "pin-tracker.js": "text/javascript; charset=utf-8",
    "dev-sign-in.js": "text/javascript; charset=utf-8",
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


class PermissionGrants(Protocol):
    """What identity offers operators; the composition root passes it in dev mode only."""

    async def grant_permissions(
        self, phone_number: str, permissions: Iterable[str], now: datetime
    ) -> uuid.UUID: ...


class DevViewerBody(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    phone_number: Annotated[str, Field(pattern=E164_PATTERN)]


def static_bytes(name: str) -> bytes:
    """The packaged copy of one file under ``static/``."""
    return resources.files("pin_sessions.web").joinpath("static", name).read_bytes()


def build_web_router(clock: Clock, dev_grants: PermissionGrants | None = None) -> APIRouter:
    """The pages and their scripts; the dev grant route exists only when ``dev_grants`` is given.

    Pages and scripts are not API operations, so the OpenAPI document leaves them out; the
    dev grant route is one, and is documented whenever it is mounted.
    """
    router = APIRouter()
    files = {name: static_bytes(name) for name in STATIC_FILES}
    pages = {path: static_bytes(name) for path, name in PAGES.items()}

    def page(path: str) -> None:
        body = pages[path]

        @router.get(path, include_in_schema=False)
        async def serve_page() -> Response:
            return Response(
                body,
                media_type="text/html; charset=utf-8",
                headers={
                    "Cache-Control": CACHE_CONTROL,
                    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
                },
            )

    for path in PAGES:
        page(path)

    @router.get("/static/{name}", include_in_schema=False)
    async def serve_static(name: str) -> Response:
        if name not in files:
            raise NotFound(f"no static file {name!r}")
        return Response(
            files[name], media_type=STATIC_FILES[name], headers={"Cache-Control": CACHE_CONTROL}
        )

    if dev_grants is not None:
        grants = dev_grants

        @router.post(
            "/dev/dev-stats/viewers",
            status_code=status.HTTP_204_NO_CONTENT,
            tags=["development"],
            responses=problems(400, 413, 422, 503),
        )
        async def grant_dev_viewer(body: DevViewerBody) -> Response:
            """Development only: let this phone's user read the dashboard after signing in."""
            await grants.grant_permissions(body.phone_number, [DEV_STATS_PERMISSION], clock.now())
            return Response(status_code=status.HTTP_204_NO_CONTENT)

    return router

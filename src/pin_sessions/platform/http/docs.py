"""``/docs`` without a CDN: Swagger UI's assets come from the ``swagger-ui-bundle-v2`` package.

FastAPI's own ``/docs`` page loads Swagger UI from jsDelivr, which a closed network (or a
strict proxy) refuses, leaving an empty page. This one is FastAPI's same page pointing at the
assets the package ships, served under ``/docs/assets/``.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from starlette.staticfiles import StaticFiles
from swagger_ui_bundle import swagger_ui_path

DOCS_PATH = "/docs"
ASSETS_PATH = f"{DOCS_PATH}/assets"


def install_offline_docs(app: FastAPI, *, openapi_url: str) -> None:
    """Serve Swagger UI for ``openapi_url`` at ``/docs``, every asset from this process."""

    async def docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=openapi_url,
            title=f"{app.title} - docs",
            swagger_js_url=f"{ASSETS_PATH}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS_PATH}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS_PATH}/favicon-32x32.png",
        )

    app.add_api_route(DOCS_PATH, docs, methods=["GET"], include_in_schema=False)
    app.mount(ASSETS_PATH, StaticFiles(directory=Path(str(swagger_ui_path))), name="docs-assets")

"""The FastAPI application factory shared by every role that serves HTTP."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager

from fastapi import APIRouter, FastAPI
from starlette.middleware import Middleware

from pin_sessions.platform.http.head import HeadAsGet
from pin_sessions.platform.http.health import build_health_router
from pin_sessions.platform.http.middleware import RequestContextMiddleware
from pin_sessions.platform.http.openapi import install_problem_schema
from pin_sessions.platform.http.problems import install_problem_handlers
from pin_sessions.platform.metrics import HttpMetrics
from pin_sessions.platform.runtime import Runtime


def create_http_app(
    runtime: Runtime,
    routers: Sequence[APIRouter] = (),
    *,
    quiet_paths: Iterable[str] = (),
    shortcuts: Sequence[Middleware] = (),
) -> FastAPI:
    """An app whose lifespan opens and closes the runtime's database pool.

    Successful requests to ``quiet_paths`` are counted in metrics but not logged line by line.
    ``shortcuts`` are ASGI middleware that answer a hot request's common case before the
    routers see it; they run inside the request context (request id, metrics, body limit).
    """

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        # `up` opens the pool before serving and shares it with the workers; then the
        # pool is not ours to close.
        owns_pool = not runtime.database.is_open
        await runtime.database.open()
        try:
            yield
        finally:
            if owns_pool:
                await runtime.database.close()

    app = FastAPI(
        title="PIN Sessions",
        version="1",
        lifespan=lifespan,
        openapi_url="/openapi.json",
        docs_url="/docs",
        redoc_url=None,
    )
    install_problem_handlers(app)
    install_problem_schema(app)
    app.include_router(build_health_router(runtime))
    for router in routers:
        app.include_router(router)
    # The middleware added last runs first.
    app.add_middleware(HeadAsGet)
    for shortcut in reversed(shortcuts):
        app.add_middleware(shortcut.cls, *shortcut.args, **shortcut.kwargs)
    app.add_middleware(
        RequestContextMiddleware,
        metrics=HttpMetrics.register(runtime.registry),
        max_body_bytes=runtime.settings.http.max_body_bytes,
        quiet_paths=quiet_paths,
    )
    return app

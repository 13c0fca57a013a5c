"""The FastAPI application factory shared by every role that serves HTTP."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from typing import Any

from fastapi import APIRouter, FastAPI
from fastapi.routing import APIRoute
from prometheus_client import CollectorRegistry
from starlette.types import ASGIApp

from pin_sessions.platform.http.admission import Admission
from pin_sessions.platform.http.cors import CorsMiddleware
from pin_sessions.platform.http.docs import install_offline_docs
from pin_sessions.platform.http.fast_path import FastPath, ServiceApp
from pin_sessions.platform.http.head import HeadAsGet
from pin_sessions.platform.http.health import metrics_router
from pin_sessions.platform.http.health import router as health_router
from pin_sessions.platform.http.middleware import QUIET_PATHS, RequestContextMiddleware
from pin_sessions.platform.http.openapi import document_info, install_problem_schema
from pin_sessions.platform.http.problem_types import router as problem_types_router
from pin_sessions.platform.http.problems import install_problem_handlers
from pin_sessions.platform.http.wiring import AppServices, ContextServices, HttpServices, install
from pin_sessions.platform.metrics import HttpMetrics
from pin_sessions.platform.runtime import Runtime

OPENAPI_PATH = "/openapi.json"
# A middleware class and its options, as ``add_middleware`` takes them.
Layer = tuple[Callable[..., ASGIApp], dict[str, Any]]


def create_http_app(
    runtime: Runtime,
    services: HttpServices,
    routers: Sequence[APIRouter] = (),
    *,
    contexts: Iterable[object] = (),
    metrics_view: CollectorRegistry | None = None,
    quiet_paths: Iterable[str] = (),
    fast_routes: Sequence[APIRoute] = (),
) -> ServiceApp:
    """An app whose lifespan opens and closes the runtime's database pool, and starts and
    stops the refreshing of the copies ``services`` keeps (``platform.refreshed``).

    ``services``, and each context's services object in ``contexts``, are given to the app
    for the routes' dependencies (``wiring``). ``/metrics`` shows the runtime's registry,
    or ``metrics_view`` when the process is one of several whose metrics are merged.
    Successful requests to ``quiet_paths`` are counted in metrics but not logged line by
    line. ``fast_routes`` — routes of ``routers`` whose endpoint takes the request alone —
    are dispatched ahead of the framework (``fast_path``), inside the same request layers as
    every other route (request context: request id, metrics, logs, body limit; CORS).
    """

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        # A test may open the pool before serving, to prepare rows; then it is not ours
        # to close.
        owns_pool = not runtime.database.is_open
        await runtime.database.open()
        try:
            for copy in services.refreshed:
                copy.start()
            yield
        finally:
            for copy in services.refreshed:
                await copy.close()
            if owns_pool:
                await runtime.database.close()

    quiet = QUIET_PATHS | frozenset(quiet_paths)
    settings = runtime.settings
    app = ServiceApp(
        title="PIN Sessions",
        version="1",
        **document_info(settings.effective_public_url),
        lifespan=lifespan,
        # SPEC §11: in prod the API's map only when PIN_HTTP__DOCS=1 says so.
        openapi_url=OPENAPI_PATH if settings.serves_docs else None,
        docs_url=None,  # install_offline_docs: FastAPI's page would fetch Swagger UI from a CDN
        redoc_url=None,
        # FastAPI's own OpenTelemetry: request spans, but neither its metrics nor its logs
        # (Prometheus and structlog have those), and no span for the quiet paths, which
        # are not logged line by line either: a span per heartbeat would be most of the
        # traces and a sixth of the heartbeat's cost.
        telemetry={
            "metrics": False,
            "logs": False,
            "exclude": lambda scope: scope.get("path") in quiet,
        },
    )
    view = runtime.registry if metrics_view is None else metrics_view
    install(
        app,
        AppServices(
            services,
            view,
            ContextServices(contexts),
            public_url=settings.effective_public_url,
        ),
    )
    install_problem_handlers(app)
    install_problem_schema(app)
    if settings.serves_docs:
        install_offline_docs(app, openapi_url=OPENAPI_PATH)
    app.include_router(health_router)
    app.include_router(problem_types_router)
    if settings.serves_metrics_on_api_port:
        app.include_router(metrics_router)
    for router in routers:
        app.include_router(router)
    # The middleware added last runs first: the request layers, then HEAD as GET. The
    # fast path's endpoints run inside the very same request layers.
    app.add_middleware(HeadAsGet)
    metrics = HttpMetrics.register(runtime.registry)
    # One bound for the process: the fast path's requests and the framework's share it.
    admission = Admission.register(settings.http.max_concurrent_requests, runtime.registry)
    for layer, options in _request_layers(runtime, metrics, admission, quiet, read_ahead=True):
        app.add_middleware(layer, **options)
    if fast_routes:
        # A fast route is a short share of work batched for many requests: nothing a
        # client's leaving could stop (receiving.py).
        fast = _request_layers(runtime, metrics, admission, quiet, read_ahead=False)
        app.fast_path = FastPath(fast_routes, layers=lambda endpoints: _wrap(endpoints, fast))
    return app


def _request_layers(
    runtime: Runtime,
    metrics: HttpMetrics,
    admission: Admission,
    quiet: frozenset[str],
    *,
    read_ahead: bool,
) -> list[Layer]:
    """This app's own middleware around every request, innermost first."""
    layers: list[Layer] = [
        (
            RequestContextMiddleware,
            {
                "metrics": metrics,
                "max_body_bytes": runtime.settings.http.max_body_bytes,
                "quiet_paths": quiet,
                "read_ahead": read_ahead,
                "admission": admission,
            },
        )
    ]
    # Outermost, so every answer on a scoped path is labelled for the allowed origin, the
    # request context's own (413, the last-word 500) included: a browser shows a script an
    # unlabelled error as a network failure, without its status.
    origins = runtime.settings.http.cors_origins
    if origins:
        layers.append((CorsMiddleware, {"origins": origins}))
    return layers


def _wrap(app: ASGIApp, layers: list[Layer]) -> ASGIApp:
    """``app`` inside ``layers``, nested as ``add_middleware`` nests them."""
    for layer, options in layers:
        app = layer(app, **options)
    return app

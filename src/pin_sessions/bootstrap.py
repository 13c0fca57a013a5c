"""The composition root: settings in, a wired process out.

Nothing connects or reads the environment at import time; each CLI command calls
these functions once, with explicit arguments.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from fastapi import APIRouter, FastAPI
from prometheus_client import CollectorRegistry

from pin_sessions.identity.liveness import RefreshSessionLiveness
from pin_sessions.platform.auth import Authenticator, TokenCodec
from pin_sessions.platform.clock import Clock, SystemClock
from pin_sessions.platform.database import Database
from pin_sessions.platform.embedded import EmbeddedPostgres
from pin_sessions.platform.http.app import create_http_app
from pin_sessions.platform.metrics import new_registry
from pin_sessions.platform.runtime import Runtime
from pin_sessions.platform.secrets import resolve_server_secrets
from pin_sessions.settings import Settings, load_settings


@contextlib.contextmanager
def database_endpoint(settings: Settings) -> Iterator[str]:
    """``PIN_DATABASE_URL`` when set; otherwise the embedded server, stopped on exit."""
    if settings.database_url is not None:
        yield settings.database_url.get_secret_value()
        return
    embedded = EmbeddedPostgres(settings.data_dir / "pg")
    dsn = embedded.start()
    try:
        yield dsn
    finally:
        embedded.stop()


def build_runtime(
    settings: Settings,
    dsn: str,
    *,
    clock: Clock | None = None,
    registry: CollectorRegistry | None = None,
    pool_max_size: int = 10,
) -> Runtime:
    return Runtime(
        settings=settings,
        database=Database(dsn, max_size=pool_max_size),
        clock=clock or SystemClock(),
        registry=registry if registry is not None else new_registry(),
        secrets=resolve_server_secrets(settings),
    )


def build_token_codec(runtime: Runtime) -> TokenCodec:
    return TokenCodec(runtime.secrets.jwt_key)


def build_authenticator(runtime: Runtime) -> Authenticator:
    """Bearer authentication for every context; identity answers whether a session is live."""
    return Authenticator(
        build_token_codec(runtime), RefreshSessionLiveness(runtime.database), runtime.clock
    )


def build_api(runtime: Runtime) -> FastAPI:
    """The HTTP API with the routes of every context."""
    authenticator = build_authenticator(runtime)
    routers: list[APIRouter] = []
    del authenticator  # each context's router is added here as it lands
    return create_http_app(runtime, routers=routers)


def api_from_environment() -> FastAPI:
    """uvicorn factory for ``serve --workers N``: each worker process wires itself."""
    settings = load_settings()
    dsn = os.environ.get("PIN_DATABASE_URL")
    if dsn is None:
        raise RuntimeError("serve --workers needs PIN_DATABASE_URL set by the parent process")
    return build_api(build_runtime(settings, dsn))

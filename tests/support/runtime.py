"""A runtime that connects to nothing: for building roles and handlers to read what they
declare (metric names, topics), never to run them."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime

from prometheus_client import CollectorRegistry

from pin_sessions.platform.clock import FixedClock
from pin_sessions.platform.database import Database
from pin_sessions.platform.metrics import new_registry
from pin_sessions.platform.runtime import Runtime
from pin_sessions.platform.secrets import resolve_server_secrets
from pin_sessions.settings import load_settings

# Never opened: building a role connects to nothing.
UNUSED_DSN = "postgresql://localhost/unused"


def unconnected_runtime(
    registry: CollectorRegistry | None = None, environ: Mapping[str, str] | None = None
) -> Runtime:
    """``environ``: variables besides the secret and the DSN the settings are read from."""
    settings = load_settings(
        {"PIN_SECRET_KEY": "x" * 40, "PIN_DATABASE_URL": UNUSED_DSN, **(environ or {})}
    )
    return Runtime(
        settings=settings,
        database=Database(UNUSED_DSN),
        clock=FixedClock(datetime(2026, 1, 1, tzinfo=UTC)),
        registry=registry if registry is not None else new_registry(),
        secrets=resolve_server_secrets(settings),
    )

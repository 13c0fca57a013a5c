"""The composition root: settings in, a wired process out.

Nothing here connects at import time or reads the environment: each CLI command loads
the settings and calls these functions once, with explicit arguments.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import asyncpg
from fastapi import FastAPI
from prometheus_client import CollectorRegistry

from pin_sessions.dev_stats import routes as dev_stats_routes
from pin_sessions.dev_stats.consumers import SessionEndedConsumer
from pin_sessions.dev_stats.consumers import UserErasedConsumer as DevStatsUserErasedConsumer
from pin_sessions.identity import http as identity_http
from pin_sessions.identity.codes import DEV_CODE_KEY_PURPOSE, DevCodes, LoggingCodeSender
from pin_sessions.identity.jobs import expire_sessions, session_retention
from pin_sessions.identity.liveness import RefreshSessionLiveness
from pin_sessions.identity.operations import IdentityOperations, random_code
from pin_sessions.identity.user_data import UserData
from pin_sessions.platform.auth import Authenticator, TokenCodec
from pin_sessions.platform.clock import Clock, SystemClock
from pin_sessions.platform.database import Bounds, Database
from pin_sessions.platform.embedded import EmbeddedPostgres
from pin_sessions.platform.http.app import create_http_app
from pin_sessions.platform.http.dependencies import HttpServices
from pin_sessions.platform.jobs import Job, PollingWorker
from pin_sessions.platform.messaging.kafka import KafkaConsumer
from pin_sessions.platform.messaging.metrics import MessagingMetrics
from pin_sessions.platform.messaging.pgbus import PostgresBusConsumer
from pin_sessions.platform.messaging.relay import OutboxRelay
from pin_sessions.platform.messaging.runner import ConsumerRunner, Handler
from pin_sessions.platform.metrics import new_registry
from pin_sessions.platform.migrations import migrate
from pin_sessions.platform.process import Role
from pin_sessions.platform.runtime import Runtime
from pin_sessions.platform.secrets import resolve_server_secrets
from pin_sessions.settings import JobSettings, Settings
from pin_sessions.user_activity import http as user_activity_http
from pin_sessions.user_activity import internal_http as user_activity_internal_http
from pin_sessions.user_activity.consumers import SignedInConsumer
from pin_sessions.user_activity.consumers import UserErasedConsumer as ActivityUserErasedConsumer
from pin_sessions.user_activity.heartbeats import Heartbeats
from pin_sessions.user_activity.jobs import activity_closer, activity_retention
from pin_sessions.user_activity.user_data import ActivityData
from pin_sessions.web import http as web_http


@dataclass(frozen=True)
class DatabaseEndpoint:
    """Where the process's database is; ``embedded`` is None when PIN_DATABASE_URL names it."""

    dsn: str
    embedded: EmbeddedPostgres | None = None


@contextlib.contextmanager
def open_database_endpoint(
    settings: Settings, *, migrate_embedded: bool = True
) -> Iterator[DatabaseEndpoint]:
    """``PIN_DATABASE_URL`` when set; otherwise the embedded server, stopped on exit."""
    if settings.database_url is not None:
        yield DatabaseEndpoint(settings.database_url.get_secret_value())
        return
    embedded = EmbeddedPostgres(settings.data_dir / "pg")
    dsn = embedded.start()
    try:
        # Nobody else manages the embedded database, so every role brings its schema up
        # to date (under the migration lock) instead of failing on a fresh data directory.
        if migrate_embedded:
            asyncio.run(_migrate_once(dsn))
        yield DatabaseEndpoint(dsn, embedded)
    finally:
        embedded.stop()


@contextlib.contextmanager
def database_endpoint(settings: Settings, *, migrate_embedded: bool = True) -> Iterator[str]:
    """The DSN of :func:`open_database_endpoint`, for the roles that only connect."""
    with open_database_endpoint(settings, migrate_embedded=migrate_embedded) as endpoint:
        yield endpoint.dsn


async def _migrate_once(dsn: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await migrate(conn)
    finally:
        await conn.close()


def build_runtime(
    settings: Settings,
    dsn: str,
    *,
    clock: Clock | None = None,
    registry: CollectorRegistry | None = None,
    database: Database | None = None,
) -> Runtime:
    """What every role shares; ``database`` defaults to the API's bounded pool."""
    return Runtime(
        settings=settings,
        database=database or api_database(settings, dsn),
        clock=clock or SystemClock(),
        registry=registry if registry is not None else new_registry(),
        secrets=resolve_server_secrets(settings),
    )


def api_database(settings: Settings, dsn: str) -> Database:
    """The API's pool: every call bounded by ``PIN_DATABASE__*`` (SPEC §9).

    No route changes its session (no SET, LISTEN or session advisory lock), so its
    connections go back to the pool without the reset round trip.
    """
    options = settings.database
    return Database(
        dsn,
        max_size=options.pool_max,
        bounds=Bounds(
            statement_timeout=options.statement_timeout, acquire_timeout=options.acquire_timeout
        ),
        reset_sessions=False,
    )


def worker_database(dsn: str, *, max_size: int) -> Database:
    """A pool for jobs, delivery and one-shot commands: they keep their own budgets (SPEC §9)."""
    return Database(dsn, max_size=max_size)


def build_token_codec(runtime: Runtime) -> TokenCodec:
    return TokenCodec(runtime.secrets.jwt_key)


def build_authenticator(runtime: Runtime) -> Authenticator:
    """Bearer authentication for every context; identity answers whether a session is live."""
    return Authenticator(
        build_token_codec(runtime), RefreshSessionLiveness(runtime.database), runtime.clock
    )


def build_identity_operations(runtime: Runtime) -> IdentityOperations:
    """Identity's use cases; codes are logged as sent and, with PIN_DEV_CODES=1, derivable."""
    dev_codes = build_dev_codes(runtime)
    return IdentityOperations(
        runtime.database,
        runtime.secrets,
        build_token_codec(runtime),
        LoggingCodeSender(),
        refresh_reuse_interval=runtime.settings.refresh_reuse_interval,
        issue_code=random_code if dev_codes is None else dev_codes.issue,
    )


def build_dev_codes(runtime: Runtime) -> DevCodes | None:
    """The codes ``GET /dev/sign-in-codes/{requestId}`` shows; None unless PIN_DEV_CODES=1."""
    if not runtime.settings.dev_codes:
        return None
    return DevCodes(runtime.database, runtime.secrets.derived_key(DEV_CODE_KEY_PURPOSE))


def build_http_services(runtime: Runtime) -> HttpServices:
    """What every context's routes may ask for (``platform.http.dependencies``)."""
    return HttpServices(
        database=runtime.database,
        clock=runtime.clock,
        authenticator=build_authenticator(runtime),
        trusted_proxies=runtime.settings.trusted_proxies,
    )


def build_api(runtime: Runtime) -> FastAPI:
    """The HTTP API with the routes of every context."""
    routers = [
        user_activity_http.router,
        user_activity_internal_http.router,
        identity_http.router,
        dev_stats_routes.router,
        web_http.router,
    ]
    state: dict[str, object] = {
        "identity": build_identity_operations(runtime),
        "user_data": UserData(runtime.database),
        "user_activity_data": ActivityData(runtime.database),
        "heartbeats": Heartbeats(runtime.database, runtime.registry),
    }
    dev_codes = build_dev_codes(runtime)
    if dev_codes is not None:
        # Development codes, and the dashboard's grant of dev-stats.view: never in prod.
        routers += [identity_http.dev_router, web_http.dev_router]
        state["dev_codes"] = dev_codes
    return create_http_app(
        runtime,
        build_http_services(runtime),
        routers,
        state=state,
        quiet_paths=user_activity_http.QUIET_PATHS,
        # Every device, once a minute: the heartbeat is served beneath the framework too.
        fast_routes=[user_activity_http.HEARTBEAT_ROUTE],
    )


OptionsT = TypeVar("OptionsT", bound=JobSettings)


def _job_worker(
    build: Callable[[Database, OptionsT, CollectorRegistry], Job[Any]],
    group: Callable[[Settings], OptionsT],
) -> Callable[[Runtime], PollingWorker[Any]]:
    """A job built from its settings group, polled at that group's interval."""

    def worker(runtime: Runtime) -> PollingWorker[Any]:
        options = group(runtime.settings)
        return PollingWorker(
            build(runtime.database, options, runtime.registry),
            clock=runtime.clock,
            interval=options.polling_interval,
            registry=runtime.registry,
        )

    return worker


# `pin-sessions job NAME` builds one of these; `up` runs them all as roles.
JOB_WORKERS: dict[str, Callable[[Runtime], PollingWorker[Any]]] = {
    "expire-sessions": _job_worker(
        expire_sessions.build_expire_sessions_job, lambda settings: settings.expire_sessions
    ),
    "session-retention": _job_worker(
        session_retention.build_session_retention_job, lambda settings: settings.session_retention
    ),
    "activity-closer": _job_worker(
        activity_closer.build_activity_closer_job, lambda settings: settings.activity_closer
    ),
    "activity-retention": _job_worker(
        activity_retention.build_activity_retention_job,
        lambda settings: settings.activity_retention,
    ),
}


def _without_metrics(handler: Callable[[], Handler]) -> Callable[[CollectorRegistry], Handler]:
    """A consumer that keeps no metrics of its own beyond the runner's."""

    def build(registry: CollectorRegistry) -> Handler:
        del registry
        return handler()

    return build


# `pin-sessions consume NAME` runs one of these; `up` runs them all. Each is built once per
# process, on the runtime's registry.
CONSUMERS: dict[str, Callable[[CollectorRegistry], Handler]] = {
    "identity-signed-in": SignedInConsumer,
    "dev-stats-session-ended": _without_metrics(SessionEndedConsumer),
    "user-activity-user-erased": _without_metrics(ActivityUserErasedConsumer),
    "dev-stats-user-erased": _without_metrics(DevStatsUserErasedConsumer),
}


def build_consumer(runtime: Runtime, name: str, metrics: MessagingMetrics) -> Role:
    """The consumer on Kafka when PIN_KAFKA_BOOTSTRAP_SERVERS is set, else on the PostgreSQL bus."""
    handler = CONSUMERS[name](runtime.registry)
    runner = ConsumerRunner(handler, runtime.database, runtime.clock, metrics)
    bootstrap_servers = runtime.settings.kafka_bootstrap_servers
    if bootstrap_servers:
        return KafkaConsumer(runner, bootstrap_servers, metrics)
    return PostgresBusConsumer(
        runner, runtime.database, runtime.clock, metrics, all_consumers=sorted(CONSUMERS)
    )


def build_relay(runtime: Runtime, metrics: MessagingMetrics) -> OutboxRelay:
    bootstrap_servers = runtime.settings.kafka_bootstrap_servers
    if not bootstrap_servers:
        raise ValueError("the relay needs PIN_KAFKA_BOOTSTRAP_SERVERS")
    return OutboxRelay(runtime.database, runtime.clock, metrics, bootstrap_servers)


def build_delivery_roles(runtime: Runtime) -> list[Role]:
    """Every consumer, plus the relay when Kafka is configured, on the runtime's registry."""
    metrics = MessagingMetrics.register(runtime.registry)
    roles = [build_consumer(runtime, name, metrics) for name in CONSUMERS]
    if runtime.settings.kafka_bootstrap_servers:
        roles.append(build_relay(runtime, metrics))
    return roles

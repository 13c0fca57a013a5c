"""The composition root: settings in, a wired process out.

Nothing here connects at import time or reads the environment: each CLI command loads
the settings and calls these functions once, with explicit arguments.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import TypeVar

import asyncpg
from prometheus_client import CollectorRegistry

from pin_sessions.dev_stats import http as dev_stats_http
from pin_sessions.dev_stats.consumers import SessionEndedConsumer
from pin_sessions.dev_stats.consumers import UserErasedConsumer as DevStatsUserErasedConsumer
from pin_sessions.identity import events as identity_events
from pin_sessions.identity import http as identity_http
from pin_sessions.identity import oauth_http
from pin_sessions.identity.client_authentication import ClientAuthentication
from pin_sessions.identity.clients import DisabledClients, ServiceClients
from pin_sessions.identity.codes import DEV_CODE_KEY_PURPOSE, DevCodes
from pin_sessions.identity.domain import SignInLimits
from pin_sessions.identity.jobs import expire_sessions, session_retention, signing_keys
from pin_sessions.identity.keys import KeyCipher, PublishedKeys, SigningKeyOperations
from pin_sessions.identity.liveness import RefreshSessionLiveness
from pin_sessions.identity.oauth import TOKEN_PATH, OAuthServer
from pin_sessions.identity.operations import IdentityOperations, random_code
from pin_sessions.identity.services import IdentityServices
from pin_sessions.identity.signing import TokenSigner
from pin_sessions.identity.sms import build_code_sender
from pin_sessions.identity.user_data import UserData
from pin_sessions.platform.auth import Authenticator
from pin_sessions.platform.clock import Clock, SystemClock
from pin_sessions.platform.database import CLIENT_TIMEOUT_GRACE, Bounds, Database
from pin_sessions.platform.embedded import EmbeddedPostgres
from pin_sessions.platform.erasure import USER_ERASED_TOPIC
from pin_sessions.platform.http.app import create_http_app
from pin_sessions.platform.http.fast_path import ServiceApp
from pin_sessions.platform.http.security_schemes import install_security_schemes
from pin_sessions.platform.http.wiring import HttpServices
from pin_sessions.platform.jobs import Job, PollingWorker
from pin_sessions.platform.key_set import KeySet
from pin_sessions.platform.messaging.kafka import KafkaConsumer
from pin_sessions.platform.messaging.kafka_admin import TopicPolicy
from pin_sessions.platform.messaging.metrics import MessagingMetrics
from pin_sessions.platform.messaging.pgbus import PostgresBusConsumer
from pin_sessions.platform.messaging.relay import OutboxRelay
from pin_sessions.platform.messaging.runner import ConsumerRunner, Handler
from pin_sessions.platform.metrics import new_registry
from pin_sessions.platform.migrations import migrate
from pin_sessions.platform.permissions import SCOPE_DESCRIPTIONS
from pin_sessions.platform.process import Role
from pin_sessions.platform.reads import Reads
from pin_sessions.platform.replica import ReadReplica
from pin_sessions.platform.runtime import Runtime
from pin_sessions.platform.secrets import resolve_server_secrets
from pin_sessions.platform.tokens import ACCESS_TOKEN_TTL, TokenVerifier
from pin_sessions.settings import KafkaSettings, PollingSettings, Settings
from pin_sessions.user_activity import activity_http as user_activity_activity_http
from pin_sessions.user_activity import events as user_activity_events
from pin_sessions.user_activity import http as user_activity_http
from pin_sessions.user_activity import internal_http as user_activity_internal_http
from pin_sessions.user_activity.consumers import SignedInConsumer
from pin_sessions.user_activity.consumers import UserErasedConsumer as ActivityUserErasedConsumer
from pin_sessions.user_activity.heartbeats import Heartbeats
from pin_sessions.user_activity.jobs import activity_closer, activity_retention
from pin_sessions.user_activity.linking import StaleLinks
from pin_sessions.user_activity.services import UserActivityServices
from pin_sessions.user_activity.user_data import ActivityData
from pin_sessions.web import http as web_http
from pin_sessions.web.services import PageFeatures, WebServices


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
        connect_timeout=options.connect_timeout,
    )


def build_reads(runtime: Runtime) -> Reads:
    """The API's reads that tolerate lag: on ``PIN_DATABASE__READ_URL`` when set (SPEC §11).

    The replica's pool has the API pool's bounds; it is opened by the replica's first good
    check, so an API whose replica is away still starts.
    """
    settings = runtime.settings
    read_url = settings.database.read_url
    if read_url is None:
        return Reads(runtime.database, runtime.registry)
    dsn = read_url.get_secret_value()
    replica = ReadReplica(
        api_database(settings, dsn),
        dsn,
        runtime.database,
        runtime.registry,
        max_lag=settings.database.read_max_lag,
    )
    return Reads(runtime.database, runtime.registry, replica)


def worker_database(settings: Settings, dsn: str, *, max_size: int | None = None) -> Database:
    """A pool for jobs, delivery and one-shot commands: they keep their own budgets (SPEC §9).

    ``PIN_DATABASE__WORKER_POOL_MAX`` connections unless the command knows better (a
    one-shot command needs one; ``up``'s worker roles share one larger pool).
    """
    options = settings.database
    return Database(
        dsn,
        max_size=options.worker_pool_max if max_size is None else max_size,
        connect_timeout=options.connect_timeout,
    )


def build_heartbeats(runtime: Runtime) -> Heartbeats:
    """The heartbeat writer: a device whose row is locked waits as for a pool connection,
    and such devices may hold at most half the pool, leaving the rest to everyone else."""
    options = runtime.settings.database
    return Heartbeats(
        runtime.database,
        runtime.registry,
        alone_limit=max(1, options.pool_max // 2),
        alone_wait=options.acquire_timeout,
    )


def build_key_cipher(runtime: Runtime) -> KeyCipher:
    """Seals and opens the signing keys' private halves under a key of the master secret."""
    return KeyCipher(runtime.secrets)


def build_token_signer(runtime: Runtime) -> TokenSigner:
    """Mints every token with the Current signing key, as the public URL (the issuer)."""
    settings = runtime.settings
    return TokenSigner(
        build_key_cipher(runtime),
        settings.effective_public_url,
        m2m_token_ttl=settings.m2m_token_ttl,
    )


def _call_bound(runtime: Runtime) -> timedelta:
    """How long a request may wait for a read of shared state: one API call (SPEC §11)."""
    return runtime.settings.database.statement_timeout + CLIENT_TIMEOUT_GRACE


def build_key_set(runtime: Runtime) -> KeySet:
    """The process's cache of the published keys: one per process, on its registry."""
    return KeySet(
        PublishedKeys(runtime.database),
        runtime.registry,
        clock=runtime.clock,
        wait_limit=_call_bound(runtime),
    )


def build_authenticator(
    runtime: Runtime, key_set: KeySet, clients: DisabledClients
) -> Authenticator:
    """Bearer authentication for every context; identity answers for sessions and clients."""
    return Authenticator(
        TokenVerifier(key_set, runtime.settings.effective_public_url),
        RefreshSessionLiveness(runtime.database),
        clients,
        runtime.clock,
    )


def build_oauth_server(runtime: Runtime, key_set: KeySet) -> OAuthServer:
    """The token, introspection and metadata endpoints' use cases."""
    return OAuthServer(
        runtime.database,
        ServiceClients(runtime.database),
        ClientAuthentication(
            runtime.database, runtime.settings.oauth.failure_limit, runtime.registry
        ),
        build_token_signer(runtime),
        TokenVerifier(key_set, runtime.settings.effective_public_url),
        RefreshSessionLiveness(runtime.database),
    )


def build_signing_key_operations(runtime: Runtime) -> SigningKeyOperations:
    return SigningKeyOperations(runtime.database, build_key_cipher(runtime))


def build_identity_operations(runtime: Runtime) -> IdentityOperations:
    """Identity's use cases; codes go out through ``PIN_SMS__PROVIDER`` within the sign-in
    limits and, with PIN_DEV_CODES=1, are derivable."""
    dev_codes = build_dev_codes(runtime)
    settings = runtime.settings
    return IdentityOperations(
        runtime.database,
        runtime.secrets,
        build_token_signer(runtime),
        build_code_sender(settings.sms, runtime.registry),
        refresh_reuse_interval=settings.refresh_reuse_interval,
        limits=SignInLimits.of(settings.sign_in.per_ip_limit, settings.sign_in.global_limit),
        issue_code=random_code if dev_codes is None else dev_codes.issue,
    )


def build_dev_codes(runtime: Runtime) -> DevCodes | None:
    """The codes ``GET /dev/sign-in-codes/{requestId}`` shows; None unless PIN_DEV_CODES=1."""
    if not runtime.settings.dev_codes:
        return None
    return DevCodes(runtime.database, runtime.secrets.derived_key(DEV_CODE_KEY_PURPOSE))


def build_identity_services(runtime: Runtime, key_set: KeySet) -> IdentityServices:
    """What identity's routes use: its use cases, the OAuth server and the key set."""
    return IdentityServices(
        operations=build_identity_operations(runtime),
        user_data=UserData(runtime.database),
        oauth=build_oauth_server(runtime, key_set),
        key_set=key_set,
        dev_codes=build_dev_codes(runtime),
    )


def build_user_activity_services(runtime: Runtime) -> UserActivityServices:
    """What user-activity's routes use: the heartbeat writer, stale links, the user's data."""
    return UserActivityServices(
        heartbeats=build_heartbeats(runtime),
        stale_links=StaleLinks(runtime.registry),
        data=ActivityData(runtime.database),
    )


def build_http_services(runtime: Runtime, key_set: KeySet | None = None) -> HttpServices:
    """What every context's routes may ask for (``platform.http.dependencies``).

    The key set and the client status are copies the app refreshes in the background
    from its start to its stop (SPEC §11); the read replica's state is checked likewise.
    """
    key_set = key_set or build_key_set(runtime)
    clients = DisabledClients(
        runtime.database, runtime.registry, clock=runtime.clock, wait_limit=_call_bound(runtime)
    )
    reads = build_reads(runtime)
    replica = () if reads.replica is None else (reads.replica,)
    return HttpServices(
        database=runtime.database,
        reads=reads,
        clock=runtime.clock,
        authenticator=build_authenticator(runtime, key_set, clients),
        trusted_proxies=runtime.settings.trusted_proxies,
        refreshed=(key_set, clients, *replica),
    )


def build_api(runtime: Runtime, *, metrics_view: CollectorRegistry | None = None) -> ServiceApp:
    """The HTTP API with the routes of every context.

    ``/metrics`` shows the runtime's registry, or ``metrics_view`` when the process is one
    of several whose metrics are merged (``serve --workers N``).
    """
    routers = [
        user_activity_http.router,
        user_activity_activity_http.router,
        user_activity_internal_http.router,
        identity_http.router,
        oauth_http.router,
        dev_stats_http.router,
        web_http.router,
    ]
    key_set = build_key_set(runtime)
    identity = build_identity_services(runtime, key_set)
    contexts = [
        identity,
        build_user_activity_services(runtime),
        WebServices(PageFeatures(dev_codes=identity.dev_codes is not None), identity.operations),
    ]
    if identity.dev_codes is not None:
        # Development codes, and the dashboard's grant of dev-stats.view: never in prod.
        routers += [identity_http.dev_router, web_http.dev_router]
    app = create_http_app(
        runtime,
        build_http_services(runtime, key_set),
        routers,
        contexts=contexts,
        metrics_view=metrics_view,
        quiet_paths=user_activity_http.QUIET_PATHS,
        # Every device, once a minute: the heartbeat is served ahead of the framework too.
        fast_routes=[user_activity_http.HEARTBEAT_ROUTE],
    )
    # /docs can try every route: a user's token, or a service's from identity's endpoint.
    install_security_schemes(app, routers, token_url=TOKEN_PATH, scopes=SCOPE_DESCRIPTIONS)
    return app


OptionsT = TypeVar("OptionsT", bound=PollingSettings)


def _job_worker(
    build: Callable[[Database, OptionsT], Job],
    group: Callable[[Settings], OptionsT],
) -> Callable[[Runtime], PollingWorker]:
    """A job built from its settings group, polled at that group's interval."""

    def worker(runtime: Runtime) -> PollingWorker:
        options = group(runtime.settings)
        return PollingWorker(
            build(runtime.database, options),
            clock=runtime.clock,
            interval=options.polling_interval,
            registry=runtime.registry,
        )

    return worker


def _signing_keys_worker(runtime: Runtime) -> PollingWorker:
    """The rotation job: it seals new keys, and drops old ones after the longest token life."""
    settings = runtime.settings
    lifetime = max(ACCESS_TOKEN_TTL, settings.m2m_token_ttl)
    build = functools.partial(
        signing_keys.build_signing_keys_job,
        cipher=build_key_cipher(runtime),
        token_lifetime=lifetime,
    )
    return _job_worker(build, lambda settings: settings.signing_keys)(runtime)


# `pin-sessions job NAME` builds one of these; `up` runs them all as roles.
JOB_WORKERS: dict[str, Callable[[Runtime], PollingWorker]] = {
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
    "signing-keys": _signing_keys_worker,
}


# `pin-sessions consume NAME` runs one of these; `up` runs them all. Each is built once per
# process, from the runtime: its registry for a handler's own metrics, its settings.
CONSUMERS: dict[str, Callable[[Runtime], Handler]] = {
    "identity-signed-in": lambda runtime: SignedInConsumer(runtime.registry),
    "dev-stats-session-ended": lambda runtime: SessionEndedConsumer(),
    "user-activity-user-erased": lambda runtime: ActivityUserErasedConsumer(
        runtime.settings.consumers.erasure_batch_size
    ),
    "dev-stats-user-erased": lambda runtime: DevStatsUserErasedConsumer(
        runtime.settings.consumers.erasure_batch_size
    ),
}


# Every topic the contexts publish to (SPEC §6): the relay creates the missing ones at start,
# and its principal may write these and no other (SPEC §11, deploy/kubernetes/kafka-users.yaml).
PUBLISHED_TOPICS = (
    identity_events.SIGN_INS_TOPIC,
    identity_events.SESSION_REVOKED_TOPIC,
    USER_ERASED_TOPIC,
    user_activity_events.SESSION_LINKED_TOPIC,
    user_activity_events.SESSION_ENDED_TOPIC,
    user_activity_events.PROPERTY_OBJECT_VIEW_ENDED_TOPIC,
)


def topic_policy(kafka: KafkaSettings) -> TopicPolicy:
    return TopicPolicy(kafka.replication_factor)


def build_consumer(runtime: Runtime, name: str, metrics: MessagingMetrics) -> Role:
    """The consumer on Kafka when PIN_KAFKA_BOOTSTRAP_SERVERS is set, else on the PostgreSQL bus."""
    handler = CONSUMERS[name](runtime)
    runner = ConsumerRunner(handler, runtime.database, runtime.clock, metrics)
    bootstrap_servers = runtime.settings.kafka_bootstrap_servers
    batches = runtime.settings.consumers
    if bootstrap_servers:
        kafka = runtime.settings.kafka
        return KafkaConsumer(
            runner,
            bootstrap_servers,
            metrics,
            batch_size=batches.batch_size,
            options=kafka.librdkafka_options(),
            topic_policy=topic_policy(kafka),
        )
    return PostgresBusConsumer(
        runner,
        runtime.database,
        runtime.clock,
        metrics,
        all_consumers=sorted(CONSUMERS),
        batch_size=batches.batch_size,
        prune_batch_size=batches.prune_batch_size,
    )


def build_relay(runtime: Runtime, metrics: MessagingMetrics) -> OutboxRelay:
    bootstrap_servers = runtime.settings.kafka_bootstrap_servers
    if not bootstrap_servers:
        raise ValueError("the relay needs PIN_KAFKA_BOOTSTRAP_SERVERS")
    return OutboxRelay(
        runtime.database,
        runtime.clock,
        metrics,
        bootstrap_servers,
        batch_size=runtime.settings.relay.batch_size,
        prune_batch_size=runtime.settings.relay.prune_batch_size,
        options=runtime.settings.kafka.librdkafka_options(),
        topic_policy=topic_policy(runtime.settings.kafka),
    )


def build_delivery_roles(runtime: Runtime) -> list[Role]:
    """Every consumer, plus the relay when Kafka is configured, on the runtime's registry."""
    metrics = MessagingMetrics.register(runtime.registry)
    roles = [build_consumer(runtime, name, metrics) for name in CONSUMERS]
    if runtime.settings.kafka_bootstrap_servers:
        roles.append(build_relay(runtime, metrics))
    return roles

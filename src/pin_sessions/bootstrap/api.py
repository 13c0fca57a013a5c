"""The API app: the platform's HTTP services and every context's routes and services."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from pin_sessions.bootstrap.database import build_reads, call_bound
from pin_sessions.bootstrap.identity import (
    build_dev_codes,
    build_identity_operations,
    build_key_set,
    build_oauth_server,
)
from pin_sessions.bootstrap.user_activity import build_user_activity_services
from pin_sessions.dev_stats import http as dev_stats_http
from pin_sessions.identity import http as identity_http
from pin_sessions.identity import oauth_http
from pin_sessions.identity.clients import DisabledClients
from pin_sessions.identity.liveness import RefreshSessionLiveness
from pin_sessions.identity.oauth import TOKEN_PATH
from pin_sessions.identity.services import IdentityServices
from pin_sessions.identity.user_data import UserData
from pin_sessions.platform.auth import Authenticator
from pin_sessions.platform.http.app import create_http_app
from pin_sessions.platform.http.fast_path import ServiceApp
from pin_sessions.platform.http.security_schemes import install_security_schemes
from pin_sessions.platform.http.wiring import HttpServices
from pin_sessions.platform.key_set import KeySet
from pin_sessions.platform.permissions import SCOPE_DESCRIPTIONS
from pin_sessions.platform.runtime import Runtime
from pin_sessions.platform.tokens import TokenVerifier
from pin_sessions.user_activity import activity_http as user_activity_activity_http
from pin_sessions.user_activity import http as user_activity_http
from pin_sessions.user_activity import internal_http as user_activity_internal_http
from pin_sessions.web import http as web_http
from pin_sessions.web.services import PageFeatures, WebServices


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


def build_http_services(runtime: Runtime, key_set: KeySet | None = None) -> HttpServices:
    """What every context's routes may ask for (``platform.http.dependencies``).

    The key set and the client status are copies the app refreshes in the background
    from its start to its stop (SPEC §11); the read replica's state is checked likewise.
    """
    key_set = key_set or build_key_set(runtime)
    clients = DisabledClients(
        runtime.database, runtime.registry, clock=runtime.clock, wait_limit=call_bound(runtime)
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


def build_identity_services(runtime: Runtime, key_set: KeySet) -> IdentityServices:
    """What identity's routes use: its use cases, the OAuth server and the key set."""
    return IdentityServices(
        operations=build_identity_operations(runtime),
        user_data=UserData(runtime.database),
        oauth=build_oauth_server(runtime, key_set),
        key_set=key_set,
        dev_codes=build_dev_codes(runtime),
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

"""What the composition root gives an app, and the one typed way its routes get it back.

An app holds one :class:`AppServices`: the platform's :class:`HttpServices` (the same
narrow set for every context), the app's own readiness and metrics view, and one frozen
services object per context (``IdentityServices``, ``UserActivityServices``, …), kept by
its class. A context declares its dependency once with :func:`provided` —
``Annotated[IdentityServices, Depends(provided(IdentityServices))]`` — so no route names
what it reads with a string, and the platform imports no context.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import TypeVar, cast

from prometheus_client import CollectorRegistry
from starlette.applications import Starlette
from starlette.requests import Request

from pin_sessions.platform.auth import Authenticator
from pin_sessions.platform.clock import Clock
from pin_sessions.platform.database import Database
from pin_sessions.platform.http.client_address import Network
from pin_sessions.platform.reads import Reads
from pin_sessions.platform.refreshed import Refreshing

T = TypeVar("T")


@dataclass(frozen=True)
class HttpServices:
    """What every context's routes may ask for (``platform.http.dependencies``)."""

    database: Database
    # Reads that tolerate lag (SPEC §11): the read replica when there is one and it is usable.
    reads: Reads
    clock: Clock
    authenticator: Authenticator
    # Peers whose X-Forwarded-For is believed (PIN_TRUSTED_PROXIES).
    trusted_proxies: tuple[Network, ...] = ()
    # Copies of database state the routes read (keys, client status): the app starts
    # refreshing them when it starts and stops with it.
    refreshed: tuple[Refreshing, ...] = ()


class Readiness:
    """Whether the process wants new traffic: not from the moment it is asked to stop (SPEC §9).

    The API role marks it as soon as SIGTERM (or SIGINT) arrives, before it stops
    listening, so a load balancer polling ``/readyz`` takes the process out of rotation
    while its requests in flight finish.
    """

    def __init__(self) -> None:
        self.stopping = False

    def stop(self) -> None:
        self.stopping = True


class ContextServices:
    """One services object per context, found by its class."""

    def __init__(self, objects: Iterable[object] = ()) -> None:
        self._by_class: dict[type[object], object] = {}
        for value in objects:
            kind = type(value)
            if kind in self._by_class:
                raise ValueError(f"two {kind.__name__} objects for one app")
            self._by_class[kind] = value

    def get(self, kind: type[T]) -> T:
        try:
            value = self._by_class[kind]
        except KeyError:
            raise LookupError(f"this app was built without a {kind.__name__}") from None
        # Kept under its own class by __init__, so it is a ``kind``: no check per request.
        return cast(T, value)


@dataclass(frozen=True)
class AppServices:
    """Everything one app's routes read, put on the app by ``create_http_app``."""

    http: HttpServices
    # What /metrics shows: the process's registry, or the merged view of several processes.
    metrics_view: CollectorRegistry
    contexts: ContextServices = field(default_factory=ContextServices)
    readiness: Readiness = field(default_factory=Readiness)
    # PIN_PUBLIC_URL, or the address the API listens on: where problem types are explained.
    public_url: str = ""


def install(app: Starlette, services: AppServices) -> None:
    """Give ``app`` its services, for :func:`app_services`."""
    app.state.services = services


def app_services(app: Starlette) -> AppServices:
    """What :func:`install` gave ``app``."""
    services = app.state.services
    if not isinstance(services, AppServices):
        raise TypeError(f"the app's services are a {type(services).__name__}")
    return services


def public_url_of(app: object) -> str | None:
    """The public URL of an app ``create_http_app`` built; None for any other (an answer
    given before routing, a bare test app)."""
    services = getattr(getattr(app, "state", None), "services", None)
    return services.public_url or None if isinstance(services, AppServices) else None


def request_services(request: Request) -> AppServices:
    """The services of the app serving ``request``."""
    return app_services(request.app)


def provided(kind: type[T]) -> Callable[[Request], Awaitable[T]]:
    """A dependency answering the app's ``kind``: one context's services object."""

    # A coroutine: FastAPI would run a plain function in a worker thread.
    async def provide(request: Request) -> T:
        return app_services(request.app).contexts.get(kind)

    return provide

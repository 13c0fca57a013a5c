"""What every context's routes may ask for, as ``Annotated`` dependencies.

The composition root gives the app one ``HttpServices`` (and each context's own services
object beside it, see ``wiring``); routes are module-level functions that declare what they
need — ``db: DatabaseDep``, ``now: Now``, ``user: CurrentUser`` — and nothing is wired at
import time. Every context gets the same narrow set: the database,
the reads that may run on a replica, the clock, the caller (by Bearer token) and the
caller's address.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import Depends, Request

from pin_sessions.platform.auth import MachinePrincipal, UserPrincipal
from pin_sessions.platform.auth_errors import AuthenticationRequired
from pin_sessions.platform.database import Database
from pin_sessions.platform.http.client_address import request_client_ip
from pin_sessions.platform.http.security_schemes import (
    OPTIONAL_USER,
    USER,
    Requirement,
    requires,
)
from pin_sessions.platform.http.wiring import HttpServices, request_services
from pin_sessions.platform.reads import Reads


def services(request: Request) -> HttpServices:
    """The platform's share of the app's services, the same for every context."""
    return request_services(request).http


# Dependencies are coroutines: FastAPI would run a plain function in a worker thread.
async def _database(request: Request) -> Database:
    return services(request).database


async def _reads(request: Request) -> Reads:
    return services(request).reads


async def _now(request: Request) -> datetime:
    return services(request).clock.now()


async def _client_ip(request: Request) -> str | None:
    return request_client_ip(request, services(request).trusted_proxies)


@requires(OPTIONAL_USER)
async def optional_user(request: Request) -> UserPrincipal | None:
    """A guest (None) or a signed-in user; bad or non-user credentials are a 401."""
    return await services(request).authenticator.optional_user(request)


@requires(USER)
async def _current_user(request: Request) -> UserPrincipal:
    return await services(request).authenticator.user(request)


@requires(USER)
async def _claimed_user(request: Request) -> UserPrincipal:
    """The user a valid token names, whether or not its session is still live."""
    principal = await services(request).authenticator.claimed_user(request)
    if principal is None:
        raise AuthenticationRequired()
    return principal


DatabaseDep = Annotated[Database, Depends(_database)]
# For reads that tolerate lag only (session history, the dev-stats summary): never for a write,
# nor for a read that must see what the caller has just written.
ReadsDep = Annotated[Reads, Depends(_reads)]
# The server's clock, read once per request (INV-SES-004: only the server sets times).
Now = Annotated[datetime, Depends(_now)]
ClientIp = Annotated[str | None, Depends(_client_ip)]
OptionalUser = Annotated[UserPrincipal | None, Depends(optional_user)]
CurrentUser = Annotated[UserPrincipal, Depends(_current_user)]
# For the routes of an account that may be gone (SPEC §10): they tell "erased" from "signed
# out" themselves, then ask for a live session with ``live_user``.
ClaimedUser = Annotated[UserPrincipal, Depends(_claimed_user)]


async def live_user(request: Request) -> UserPrincipal:
    """``CurrentUser``, for a route that first needed the claim alone."""
    return await _current_user(request)


def permission_required(permission: str) -> Any:
    """For ``dependencies=[...]``: a signed-in user holding ``permission``."""

    @requires(USER)
    async def check(request: Request) -> UserPrincipal:
        return await services(request).authenticator.user(request, permission)

    return Depends(check)


def scope_required(*any_of_scopes: str) -> Any:
    """For ``dependencies=[...]``: a service holding one of ``any_of_scopes``."""

    @requires(Requirement(scopes=any_of_scopes))
    async def check(request: Request) -> MachinePrincipal:
        return await services(request).authenticator.machine(request, *any_of_scopes)

    return Depends(check)

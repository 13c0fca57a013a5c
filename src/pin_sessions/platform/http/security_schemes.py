"""Who may call each operation, in the OpenAPI document, so ``/docs`` can try every route.

Two schemes (SPEC §3, §4, §8), which Swagger UI's **Authorize** offers:

* ``bearer`` — HTTP bearer: a user's access token, from ``POST /api/identity/sign-in/confirm``
  or ``/sessions/refresh``;
* ``oauth2`` — the client-credentials flow at the token endpoint, with the scopes a service
  may hold: Authorize asks for a registered client's id and secret and fetches the token.

An operation's ``security`` is derived from the dependencies its route declares —
``CurrentUser``, ``OptionalUser``, ``ClaimedUser``, ``permission_required`` and
``scope_required`` each carry the :class:`Requirement` they enforce (:func:`requires`) — so
the document says what the route checks, and cannot drift from it. A route that reads the
token by hand (the heartbeat, served ahead of the framework) declares ``security`` in its
``openapi_extra``, which is kept as given.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from fastapi import APIRouter, FastAPI
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute

BEARER_SCHEME = "bearer"
OAUTH2_SCHEME = "oauth2"
_MARK = "__pin_requirement__"

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Requirement:
    """What a caller must present: a user's token (``optional``: or nothing, a guest), or a
    service's token holding any one of ``scopes``."""

    optional: bool = False
    scopes: tuple[str, ...] = ()

    def security(self) -> list[dict[str, list[str]]]:
        """The operation's OpenAPI ``security``: alternatives, any one of which suffices."""
        if self.scopes:
            return [{OAUTH2_SCHEME: [scope]} for scope in self.scopes]
        user: list[dict[str, list[str]]] = [{BEARER_SCHEME: []}]
        return [{}, *user] if self.optional else user


USER = Requirement()
OPTIONAL_USER = Requirement(optional=True)


def requires(requirement: Requirement) -> Callable[[F], F]:
    """Mark a dependency with the credentials it checks, for the document."""

    def mark(dependency: F) -> F:
        setattr(dependency, _MARK, requirement)
        return dependency

    return mark


def security_schemes(*, token_url: str, scopes: Mapping[str, str]) -> dict[str, Any]:
    """``components.securitySchemes``: the user's bearer token and the services' flow."""
    return {
        BEARER_SCHEME: {
            "type": "http",
            "scheme": "bearer",
            "bearerFormat": "JWT",
            "description": "A user's access token (`accessToken` of "
            "`POST /api/identity/sign-in/confirm` or `/api/identity/sessions/refresh`).",
        },
        OAUTH2_SCHEME: {
            "type": "oauth2",
            "description": "A service's token: the client-credentials grant of a client "
            "registered with `pin-sessions clients create` (HTTP Basic or form fields).",
            "flows": {"clientCredentials": {"tokenUrl": token_url, "scopes": dict(scopes)}},
        },
    }


def install_security_schemes(
    app: FastAPI, routers: Sequence[APIRouter], *, token_url: str, scopes: Mapping[str, str]
) -> None:
    """Declare the schemes in ``app``'s document, and the ``security`` of each operation of
    ``routers`` (the routers ``app`` includes, as their routes were declared)."""
    generate = app.openapi
    schemes = security_schemes(token_url=token_url, scopes=scopes)

    def openapi() -> dict[str, Any]:
        document = generate()
        components = document.setdefault("components", {})
        if "securitySchemes" not in components:  # FastAPI builds the document once
            components["securitySchemes"] = schemes
            _declare_operations(document.get("paths", {}), routers)
        return document

    app.openapi = openapi  # type: ignore[method-assign]


def _declare_operations(paths: dict[str, Any], routers: Sequence[APIRouter]) -> None:
    for router in routers:
        for route in router.routes:
            if not isinstance(route, APIRoute) or not route.include_in_schema:
                continue
            requirement = _requirement_of(route.dependant)
            for method in route.methods or ():
                operation = paths.get(route.path_format, {}).get(method.lower())
                if operation is not None and requirement is not None:
                    operation.setdefault("security", requirement.security())


def _requirement_of(dependant: Dependant) -> Requirement | None:
    """The strictest requirement among a route's dependencies (a required user over a guest)."""
    found = [
        requirement
        for call in _calls(dependant)
        if isinstance(requirement := getattr(call, _MARK, None), Requirement)
    ]
    for requirement in found:
        if requirement.scopes or not requirement.optional:
            return requirement
    return found[0] if found else None


def _calls(dependant: Dependant) -> Iterator[Any]:
    for sub in dependant.dependencies:
        yield sub.call
        yield from _calls(sub)

"""Service clients of the client-credentials grant (SPEC §8, RFC 6749 §4.4).

A client is a UUID, a name, the scopes it may hold and the SHA-256 of its secret: 256
random bits, shown once by ``clients create`` / ``rotate-secret`` and never stored. A
high-entropy secret needs no slow hash; it is compared in constant time, also against a
stand-in hash when the client does not exist, so timing tells nothing about which ids
are registered. Authenticating a client, and limiting its failures, is
``client_authentication``'s.

A disabled client gets no token, and :class:`DisabledClients` (the
:class:`pin_sessions.platform.auth.ClientStatus` port) tells internal routes to refuse
the tokens it already holds — from the last good copy of the set of disabled ids, read
again in the background every :data:`DISABLED_CLIENTS_REFRESH` (SPEC §11), so the refusal
lands within :data:`DISABLED_CLIENTS_MAX_AGE` while the database answers; in a stall the
copy stays in use and ``pin_auth_client_status_age_seconds`` shows its age.
"""

from __future__ import annotations

import hashlib
import secrets
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from prometheus_client import CollectorRegistry, Gauge

from pin_sessions.identity import repository
from pin_sessions.identity.errors import (
    ClientNameTaken,
    ClientNotActive,
    InvalidScope,
    UnknownClient,
)
from pin_sessions.platform.clock import Clock
from pin_sessions.platform.database import Database
from pin_sessions.platform.errors import UniqueViolation
from pin_sessions.platform.ids import new_id
from pin_sessions.platform.permissions import SCOPE_DESCRIPTIONS, listed, unknown_names
from pin_sessions.platform.refreshed import RefreshedCopy

SECRET_BYTES = 32
MAX_NAME_LENGTH = 100
DISABLED_CLIENTS_MAX_AGE = timedelta(seconds=30)
# A third of the promise: two reads may fail (or the database be slow) and it still holds.
DISABLED_CLIENTS_REFRESH = timedelta(seconds=10)
# Compared against when the client is unknown, so that path costs what a wrong secret does.
STAND_IN_HASH = hashlib.sha256(b"no such client").digest()
# Migration 0021's index: two clients never share a name.
UNIQUE_NAME = "ux_clients_name"


class ClientState(StrEnum):
    ACTIVE = "Active"
    DISABLED = "Disabled"


@dataclass(frozen=True)
class Client:
    client_id: uuid.UUID
    name: str
    scopes: tuple[str, ...]
    status: ClientState
    created_at: datetime
    updated_at: datetime

    def to_json(self) -> dict[str, Any]:
        return {
            "clientId": str(self.client_id),
            "name": self.name,
            "scopes": list(self.scopes),
            "status": self.status.value,
            "createdAt": self.created_at.isoformat(),
            "updatedAt": self.updated_at.isoformat(),
        }


def secret_hash(secret: str) -> bytes:
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).digest()


def granted_scopes(client: Client, requested: str | None) -> tuple[str, ...]:
    """RFC 6749 §3.3: the requested subset of the client's scopes, or all of them.

    Only scopes of the catalogue are issued: a client registered with another name (before
    the catalogue was enforced) never gets it in a token.
    """
    known = tuple(scope for scope in client.scopes if scope in SCOPE_DESCRIPTIONS)
    if requested is None:
        if not known:
            raise InvalidScope(f"the client holds none of the scopes {listed(SCOPE_DESCRIPTIONS)}")
        return known
    wanted = requested.split(" ")
    # The unknown names are not echoed: error_description allows only some characters.
    if unknown_names(wanted, SCOPE_DESCRIPTIONS):
        raise InvalidScope(f"scope must be space-separated names of {listed(SCOPE_DESCRIPTIONS)}")
    outside = sorted(set(wanted) - set(known))
    if outside:
        raise InvalidScope(f"the client may not hold {' '.join(outside)}")
    return tuple(sorted(set(wanted)))


def client_of(row: Any) -> Client:
    return Client(
        client_id=row["client_id"],
        name=row["name"],
        scopes=tuple(row["scopes"]),
        status=ClientState(row["status"]),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )


class ServiceClients:
    """Registering, listing and authenticating clients."""

    def __init__(self, database: Database) -> None:
        self._database = database

    async def create(self, name: str, scopes: Iterable[str], now: datetime) -> tuple[Client, str]:
        """A new Active client and its secret, which only this answer ever shows.

        ClientNameTaken when another client, Active or disabled, has the name.
        """
        client_id, secret = new_id(), secrets.token_urlsafe(SECRET_BYTES)
        granted = sorted(set(scopes))
        try:
            async with self._database.transaction() as conn:
                await repository.insert_client(
                    conn, client_id, name, secret_hash(secret), granted, now
                )
        except UniqueViolation as exc:
            if exc.constraint != UNIQUE_NAME:
                raise
            raise ClientNameTaken(f"a service client is already named {name!r}") from exc
        return Client(client_id, name, tuple(granted), ClientState.ACTIVE, now, now), secret

    async def registered(self) -> list[Client]:
        async with self._database.connection() as conn:
            return [client_of(row) for row in await repository.clients(conn)]

    async def find(self, id_or_name: str) -> Client:
        """The Active client with this id or this name.

        For an operator's command (``token m2m``), never for a request: it authenticates
        nobody. UnknownClient when none matches; ClientNotActive when it is disabled.
        """
        parsed = parse_client_id(id_or_name)
        async with self._database.connection() as conn:
            if parsed is not None:
                row = await repository.client(conn, parsed)
            else:
                row = await repository.client_named(conn, id_or_name)
        if row is None:
            raise UnknownClient(f"no service client has the id or name {id_or_name!r}")
        found = client_of(row)
        if found.status is not ClientState.ACTIVE:
            raise ClientNotActive(f"the service client {id_or_name!r} is disabled")
        return found

    async def rotate_secret(self, client_id: uuid.UUID, now: datetime) -> str:
        """A new secret for an Active client; the old one stops working at once."""
        secret = secrets.token_urlsafe(SECRET_BYTES)
        async with self._database.transaction() as conn:
            if await repository.rotate_client_credentials(
                conn, client_id, secret_hash(secret), now
            ):
                return secret
            status = await repository.client_status(conn, client_id)
        raise UnknownClient() if status is None else ClientNotActive()

    async def disable(self, client_id: uuid.UUID, now: datetime) -> bool:
        """Active → Disabled; False when it was disabled already (nothing changes)."""
        async with self._database.transaction() as conn:
            if await repository.disable_client(conn, client_id, now):
                return True
            if await repository.client_status(conn, client_id) is None:
                raise UnknownClient()
        return False

    async def is_disabled_now(self, client_id: str) -> bool:
        """:class:`DisabledClients`' answer, asked of the table now rather than of a cache."""
        parsed = parse_client_id(client_id)
        if parsed is None:
            return False
        async with self._database.connection() as conn:
            status = await repository.client_status(conn, parsed)
        return bool(status == ClientState.DISABLED)


def parse_client_id(value: str) -> uuid.UUID | None:
    """The client id ``value`` names, if it is one (the input may be anything)."""
    try:
        return uuid.UUID(value)
    except ValueError:
        return None


class DisabledClients:
    """Implements :class:`pin_sessions.platform.auth.ClientStatus` from a copy of the ids."""

    def __init__(
        self,
        database: Database,
        registry: CollectorRegistry,
        *,
        clock: Clock,
        wait_limit: timedelta,
    ) -> None:
        self._database = database
        age = Gauge(
            "pin_auth_client_status_age_seconds",
            "Age of the set of disabled service clients in use (read again every 10 s)",
            registry=registry,
            multiprocess_mode="livemax",
        )
        self._copy = RefreshedCopy(
            "client status",
            self._read,
            clock=clock,
            refresh_after=DISABLED_CLIENTS_REFRESH,
            wait_limit=wait_limit,
            age=age,
        )

    def start(self) -> None:
        self._copy.start()

    async def close(self) -> None:
        await self._copy.close()

    async def is_disabled(self, client_id: str) -> bool:
        return client_id in (await self._copy.get()).value

    async def _read(self) -> frozenset[str]:
        async with self._database.connection() as conn:
            client_ids = await repository.disabled_client_ids(conn)
        return frozenset(str(client_id) for client_id in client_ids)

"""Service clients of the client-credentials grant (SPEC §8, RFC 6749 §4.4).

A client is a UUID, a name, the scopes it may hold and the SHA-256 of its secret: 256
random bits, shown once by ``clients create`` / ``rotate-secret`` and never stored. A
high-entropy secret needs no slow hash; it is compared in constant time, also against a
stand-in hash when the client does not exist, so timing tells nothing about which ids
are registered. A failed authentication is logged with the client id and the reason,
never the secret.

A disabled client gets no token, and :class:`DisabledClients` (the
:class:`pin_sessions.platform.auth.ClientStatus` port) tells internal routes to refuse
the tokens it already holds — from a set of disabled ids read again every
:data:`DISABLED_CLIENTS_MAX_AGE`, so the refusal lands within that.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import re
import secrets
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

import structlog

from pin_sessions.identity import sql
from pin_sessions.identity.errors import (
    AmbiguousClient,
    ClientNotActive,
    InvalidClient,
    InvalidScope,
    UnknownClient,
)
from pin_sessions.platform.database import Database
from pin_sessions.platform.ids import new_id

log = structlog.get_logger(__name__)

SECRET_BYTES = 32
MAX_NAME_LENGTH = 100
DISABLED_CLIENTS_MAX_AGE = timedelta(seconds=30)
# RFC 6749 §3.3 allows more; ours are the names of platform.permissions: dotted lowercase.
SCOPE_PATTERN = re.compile(r"^[a-z0-9-]+(\.[a-z0-9-]+)*$")
MAX_SCOPE_LENGTH = 64
# Compared against when the client is unknown, so that path costs what a wrong secret does.
_STAND_IN_HASH = hashlib.sha256(b"no such client").digest()


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


def is_scope(value: str) -> bool:
    return len(value) <= MAX_SCOPE_LENGTH and SCOPE_PATTERN.fullmatch(value) is not None


def secret_hash(secret: str) -> bytes:
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).digest()


def granted_scopes(client: Client, requested: str | None) -> tuple[str, ...]:
    """RFC 6749 §3.3: the requested subset of the client's scopes, or all of them."""
    if requested is None:
        return client.scopes
    wanted = requested.split(" ")
    if not all(is_scope(scope) for scope in wanted):
        raise InvalidScope("scope must be space-separated scope names")
    outside = sorted(set(wanted) - set(client.scopes))
    if outside:
        raise InvalidScope(f"the client may not hold {' '.join(outside)}")
    return tuple(sorted(set(wanted)))


def _client(row: Any) -> Client:
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
        """A new Active client and its secret, which only this answer ever shows."""
        client_id, secret = new_id(), secrets.token_urlsafe(SECRET_BYTES)
        granted = sorted(set(scopes))
        async with self._database.transaction() as conn:
            await conn.execute(
                sql.INSERT_CLIENT, client_id, name, secret_hash(secret), granted, now
            )
        return Client(client_id, name, tuple(granted), ClientState.ACTIVE, now, now), secret

    async def registered(self) -> list[Client]:
        async with self._database.connection() as conn:
            return [_client(row) for row in await conn.fetch(sql.SELECT_CLIENTS)]

    async def find(self, id_or_name: str) -> Client:
        """The Active client with this id, or the one Active client with this name.

        For an operator's command (``token m2m``), never for a request: it authenticates
        nobody. UnknownClient when none matches; ClientNotActive when it is disabled;
        AmbiguousClient when several have the name.
        """
        parsed = _uuid(id_or_name)
        async with self._database.connection() as conn:
            if parsed is not None:
                row = await conn.fetchrow(sql.SELECT_CLIENT_CREDENTIALS, parsed)
                rows = [] if row is None else [row]
            else:
                rows = await conn.fetch(sql.SELECT_CLIENTS_NAMED, id_or_name)
        found = [_client(row) for row in rows]
        if not found:
            raise UnknownClient(f"no service client has the id or name {id_or_name!r}")
        active = [client for client in found if client.status is ClientState.ACTIVE]
        if not active:
            raise ClientNotActive(f"the service client {id_or_name!r} is disabled")
        if len(active) > 1:
            raise AmbiguousClient(
                f"{len(active)} active service clients are named {id_or_name!r}: "
                "give the id (`pin-sessions clients list`)"
            )
        return active[0]

    async def rotate_secret(self, client_id: uuid.UUID, now: datetime) -> str:
        """A new secret for an Active client; the old one stops working at once."""
        secret = secrets.token_urlsafe(SECRET_BYTES)
        async with self._database.transaction() as conn:
            if await conn.fetchval(
                sql.ROTATE_CLIENT_CREDENTIALS, client_id, secret_hash(secret), now
            ):
                return secret
            status = await conn.fetchval(sql.SELECT_CLIENT_STATUS, client_id)
        raise UnknownClient() if status is None else ClientNotActive()

    async def disable(self, client_id: uuid.UUID, now: datetime) -> bool:
        """Active → Disabled; False when it was disabled already (nothing changes)."""
        async with self._database.transaction() as conn:
            if await conn.fetchval(sql.DISABLE_CLIENT, client_id, now):
                return True
            if await conn.fetchval(sql.SELECT_CLIENT_STATUS, client_id) is None:
                raise UnknownClient()
        return False

    async def authenticate(self, client_id: str, secret: str) -> Client:
        """The Active client ``client_id`` names, if ``secret`` is its; else InvalidClient."""
        parsed = _uuid(client_id)
        row = None
        if parsed is not None:
            async with self._database.connection() as conn:
                row = await conn.fetchrow(sql.SELECT_CLIENT_CREDENTIALS, parsed)
        expected = row["secret_hash"] if row is not None else _STAND_IN_HASH
        matches = hmac.compare_digest(secret_hash(secret), expected)
        if row is None or not matches or row["status"] != ClientState.ACTIVE:
            reason = (
                "unknown client" if row is None else "wrong secret" if not matches else "disabled"
            )
            # The id only when it is one (the input may be anything); never the secret.
            log.warning(
                "client authentication failed",
                clientId=None if parsed is None else str(parsed),
                reason=reason,
            )
            raise InvalidClient("client authentication failed")
        return _client(row)

    async def is_disabled_now(self, client_id: str) -> bool:
        """:class:`DisabledClients`' answer, asked of the table now rather than of a cache."""
        parsed = _uuid(client_id)
        if parsed is None:
            return False
        async with self._database.connection() as conn:
            status = await conn.fetchval(sql.SELECT_CLIENT_STATUS, parsed)
        return bool(status == ClientState.DISABLED)


def _uuid(value: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(value)
    except ValueError:
        return None


class DisabledClients:
    """Implements :class:`pin_sessions.platform.auth.ClientStatus` from a cached set of ids."""

    def __init__(self, database: Database) -> None:
        self._database = database
        self._ids: frozenset[str] = frozenset()
        self._read_at: datetime | None = None
        self._lock = asyncio.Lock()

    async def is_disabled(self, client_id: str, now: datetime) -> bool:
        if self._stale(now):
            async with self._lock:
                if self._stale(now):
                    async with self._database.connection() as conn:
                        rows = await conn.fetch(sql.SELECT_DISABLED_CLIENT_IDS)
                    self._ids = frozenset(str(row[0]) for row in rows)
                    self._read_at = now
        return client_id in self._ids

    def _stale(self, now: datetime) -> bool:
        read_at = self._read_at
        return read_at is None or now < read_at or now - read_at >= DISABLED_CLIENTS_MAX_AGE

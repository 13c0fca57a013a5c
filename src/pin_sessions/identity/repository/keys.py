"""Signing keys (SPEC §8): their rows, sealed private keys and the lock every decision takes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import asyncpg

from pin_sessions.identity.repository.loaded import QUERIES
from pin_sessions.platform.database import Connection

# One transaction at a time decides about the keys: the job, `keys rotate` and a first
# signer on an empty table (the unique indexes back this up).
SIGNING_KEYS_LOCK_CLASS = 0x4B455953  # "KEYS"


async def lock_signing_keys(conn: Connection) -> None:
    """The keys are this transaction's to decide about until it ends."""
    await QUERIES.lock_signing_keys.execute(conn, lock_class=SIGNING_KEYS_LOCK_CLASS)


async def signing_keys(conn: Connection) -> list[asyncpg.Record]:
    """Every key's ``kid``, ``status``, ``created_at``, ``activated_at`` and ``retired_at``."""
    return await QUERIES.select_signing_keys.fetch(conn)


async def public_jwks(conn: Connection) -> list[asyncpg.Record]:
    """Every key's public JWK, oldest first (one column)."""
    return await QUERIES.select_public_jwks.fetch(conn)


async def current_signing_key(conn: Connection) -> asyncpg.Record | None:
    """The Current key's ``kid`` and sealed ``private_key``; None while there is none."""
    return await QUERIES.select_current_signing_key.fetchrow(conn)


async def insert_signing_key(
    conn: Connection,
    kid: str,
    public_jwk: Mapping[str, Any],
    sealed_private_key: bytes,
    status: str,
    now: datetime,
) -> bool:
    """A new key with ``status``; False when a key with that status exists (nothing changes)."""
    inserted = await QUERIES.insert_signing_key.execute(
        conn,
        kid=kid,
        public_jwk=public_jwk,
        private_key=sealed_private_key,
        status=status,
        created_at=now,
    )
    return inserted.endswith(" 1")


async def retire_current_signing_key(conn: Connection, now: datetime) -> list[str]:
    """Current → Retired: the retired kids (one, or none)."""
    return [row[0] for row in await QUERIES.retire_current_signing_key.fetch(conn, now=now)]


async def promote_signing_key(conn: Connection, kid: str, now: datetime) -> None:
    await QUERIES.promote_signing_key.execute(conn, kid=kid, now=now)


async def delete_signing_keys(conn: Connection, kids: Sequence[str]) -> None:
    await QUERIES.delete_signing_keys.execute(conn, kids=list(kids))


async def delete_unretired_signing_keys(conn: Connection) -> list[str]:
    """The Current and Next keys go: their kids."""
    return [row[0] for row in await QUERIES.delete_unretired_signing_keys.fetch(conn)]

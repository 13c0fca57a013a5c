"""Identity's signing keys (SPEC §8): ES256 key pairs shared by every instance.

Each key is a P-256 pair whose ``kid`` is the RFC 7638 thumbprint of its public JWK. The
private half is stored encrypted with AES-256-GCM under a key derived from
``PIN_SECRET_KEY`` (HKDF, purpose ``signing-key-encryption``), the kid as associated data
so a ciphertext cannot be moved to another row. A key's life is ``Next`` (published,
not yet signing) → ``Current`` (signing) → ``Retired`` (verifying what it signed) →
deleted; :func:`rotation_plan` decides the steps, the ``signing-keys`` job and
``keys rotate`` apply them under one advisory lock.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from jwt.algorithms import ECAlgorithm

from pin_sessions.identity import repository
from pin_sessions.platform.database import Connection, Database
from pin_sessions.platform.secrets import ServerSecrets
from pin_sessions.platform.tokens import ALGORITHM, ISSUED_AT_LEEWAY

KEY_ENCRYPTION_PURPOSE = "signing-key-encryption"
NONCE_BYTES = 12


class KeyStatus(StrEnum):
    NEXT = "Next"
    CURRENT = "Current"
    RETIRED = "Retired"


class KeyDecryptionFailed(Exception):
    """A stored private key does not open under this PIN_SECRET_KEY (another one, or tampering)."""


@dataclass(frozen=True)
class KeyRow:
    kid: str
    status: KeyStatus
    created_at: datetime
    activated_at: datetime | None
    retired_at: datetime | None

    def to_json(self) -> dict[str, Any]:
        return {
            "kid": self.kid,
            "status": self.status.value,
            "createdAt": self.created_at.isoformat(),
            "activatedAt": _iso(self.activated_at),
            "retiredAt": _iso(self.retired_at),
        }


@dataclass(frozen=True)
class RotationPolicy:
    rotate_after: timedelta
    publish_ahead: timedelta
    # The longest any token lives: a Retired key goes once the last token it signed expired.
    token_lifetime: timedelta


@dataclass
class RotationPlan:
    create_current: bool = False
    create_next: bool = False
    promote: str | None = None
    drop: list[str] = field(default_factory=list)


def rotation_plan(keys: list[KeyRow], now: datetime, policy: RotationPolicy) -> RotationPlan:
    """What to do with the keys at ``now``: one step of their life each, decided together."""
    by_status: dict[KeyStatus, list[KeyRow]] = {status: [] for status in KeyStatus}
    for key in keys:
        by_status[key.status].append(key)
    current = by_status[KeyStatus.CURRENT][0] if by_status[KeyStatus.CURRENT] else None
    waiting = by_status[KeyStatus.NEXT][0] if by_status[KeyStatus.NEXT] else None
    plan = RotationPlan()
    if waiting is not None and (
        current is None or waiting.created_at <= now - policy.publish_ahead
    ):
        plan.promote = waiting.kid
    elif current is None:
        plan.create_current = True  # a new database: the first key signs at once
    elif waiting is None and current.activated_at is not None:
        plan.create_next = current.activated_at <= now - policy.rotate_after
    # A token signed just before its key retired lives one lifetime more, plus the skew
    # between the clocks of the instance that signed it and the one reading it.
    drop_before = now - policy.token_lifetime - ISSUED_AT_LEEWAY
    plan.drop = [
        key.kid
        for key in by_status[KeyStatus.RETIRED]
        if key.retired_at is not None and key.retired_at <= drop_before
    ]
    return plan


@dataclass(frozen=True)
class KeyPair:
    kid: str
    public_jwk: dict[str, Any]
    private_key: ec.EllipticCurvePrivateKey


def new_key_pair() -> KeyPair:
    private_key = ec.generate_private_key(ec.SECP256R1())
    jwk: dict[str, Any] = ECAlgorithm.to_jwk(private_key.public_key(), as_dict=True)
    kid = thumbprint(jwk)
    return KeyPair(kid, {**jwk, "kid": kid, "use": "sig", "alg": ALGORITHM}, private_key)


def thumbprint(jwk: dict[str, Any]) -> str:
    """RFC 7638: SHA-256 of the required members in lexicographic order, base64url."""
    members = {name: jwk[name] for name in ("crv", "kty", "x", "y")}
    canonical = json.dumps(members, separators=(",", ":"), sort_keys=True).encode()
    return base64.urlsafe_b64encode(hashlib.sha256(canonical).digest()).rstrip(b"=").decode()


class KeyCipher:
    """Encrypts private keys at rest under a key derived from the master secret."""

    def __init__(self, secrets_: ServerSecrets) -> None:
        self._aead = AESGCM(secrets_.derived_key(KEY_ENCRYPTION_PURPOSE))

    def seal(self, kid: str, private_key: ec.EllipticCurvePrivateKey) -> bytes:
        plain = private_key.private_bytes(
            serialization.Encoding.DER,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        nonce = secrets.token_bytes(NONCE_BYTES)
        return nonce + self._aead.encrypt(nonce, plain, kid.encode())

    def open(self, kid: str, sealed: bytes) -> ec.EllipticCurvePrivateKey:
        try:
            plain = self._aead.decrypt(sealed[:NONCE_BYTES], sealed[NONCE_BYTES:], kid.encode())
        except InvalidTag as exc:
            raise KeyDecryptionFailed(
                f"signing key {kid} does not decrypt under this PIN_SECRET_KEY"
            ) from exc
        key = serialization.load_der_private_key(plain, password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise KeyDecryptionFailed(f"signing key {kid} is not an EC key")
        return key


async def insert_new_key(
    conn: Connection, cipher: KeyCipher, status: KeyStatus, now: datetime
) -> str | None:
    """A fresh key with ``status``; None when one with that status already exists."""
    pair = new_key_pair()
    inserted = await repository.insert_signing_key(
        conn, pair.kid, pair.public_jwk, cipher.seal(pair.kid, pair.private_key), status.value, now
    )
    return pair.kid if inserted else None


async def lock_keys(conn: Connection) -> None:
    await repository.lock_signing_keys(conn)


async def key_rows(conn: Connection) -> list[KeyRow]:
    rows = await repository.signing_keys(conn)
    return [
        KeyRow(
            row["kid"],
            KeyStatus(row["status"]),
            row["created_at"],
            row["activated_at"],
            row["retired_at"],
        )
        for row in rows
    ]


@dataclass
class AppliedPlan:
    created: list[str] = field(default_factory=list)
    activated: list[str] = field(default_factory=list)
    retired: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)


async def apply_plan(
    conn: Connection, cipher: KeyCipher, plan: RotationPlan, now: datetime
) -> AppliedPlan:
    """Carry ``plan`` out in the caller's transaction, which holds the keys' lock."""
    applied = AppliedPlan()
    if plan.promote is not None:
        applied.retired = await repository.retire_current_signing_key(conn, now)
        await repository.promote_signing_key(conn, plan.promote, now)
        applied.activated.append(plan.promote)
    for status, wanted in (
        (KeyStatus.CURRENT, plan.create_current),
        (KeyStatus.NEXT, plan.create_next),
    ):
        kid = await insert_new_key(conn, cipher, status, now) if wanted else None
        if kid is not None:
            applied.created.append(kid)
            if status is KeyStatus.CURRENT:
                applied.activated.append(kid)
    if plan.drop:
        await repository.delete_signing_keys(conn, plan.drop)
        applied.dropped = list(plan.drop)
    return applied


class SigningKeyOperations:
    """What an operator does to the keys (``keys list``, ``keys rotate [--now]``)."""

    def __init__(self, database: Database, cipher: KeyCipher) -> None:
        self._database = database
        self._cipher = cipher

    async def all(self) -> list[KeyRow]:
        async with self._database.connection() as conn:
            return await key_rows(conn)

    async def rotate(self, now: datetime) -> list[KeyRow]:
        """Publish a Next key now (unless one waits already); the job makes it Current."""
        async with self._database.transaction() as conn:
            await lock_keys(conn)
            keys = await key_rows(conn)
            if not any(key.status is KeyStatus.NEXT for key in keys):
                status = (
                    KeyStatus.NEXT
                    if any(key.status is KeyStatus.CURRENT for key in keys)
                    else KeyStatus.CURRENT
                )
                await insert_new_key(conn, self._cipher, status, now)
            return await key_rows(conn)

    async def rotate_now(self, now: datetime) -> tuple[list[KeyRow], list[str]]:
        """A leaked key: a new key signs at once; the Current (and any Next) is deleted."""
        async with self._database.transaction() as conn:
            await lock_keys(conn)
            deleted = await repository.delete_unretired_signing_keys(conn)
            await insert_new_key(conn, self._cipher, KeyStatus.CURRENT, now)
            return await key_rows(conn), deleted


class PublishedKeys:
    """Implements :class:`pin_sessions.platform.key_set.KeySource` on identity's table."""

    def __init__(self, database: Database) -> None:
        self._database = database

    async def public_keys(self) -> list[dict[str, Any]]:
        async with self._database.connection() as conn:
            rows = await repository.public_jwks(conn)
        return [dict(row[0]) for row in rows]


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()

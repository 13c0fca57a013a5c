"""The public keys that verify tokens, cached in process (SPEC §8).

Identity keeps the signing keys; every process verifies with their public halves, read
through the :class:`KeySource` port (identity implements it, the composition root wires
it) and kept here:

* the set is read again once it is older than :data:`MAX_AGE` by the injected clock, so a
  key deleted by ``keys rotate --now`` stops verifying everywhere within that age;
* a token naming a kid the set lacks (a key created a moment ago) reads the set again at
  once — but from a bucket of :data:`UNKNOWN_KID_RELOADS` reloads refilled one per
  :data:`UNKNOWN_KID_REFILL`, so a storm of tokens with made-up kids costs the database a
  few reads, not one per request;
* concurrent callers share one read (single flight);
* the JWKS document (``GET /.well-known/jwks.json``) is rendered once per read of the set.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from cryptography.hazmat.primitives.asymmetric.ec import EllipticCurvePublicKey
from jwt.algorithms import ECAlgorithm
from prometheus_client import CollectorRegistry, Counter

MAX_AGE = timedelta(seconds=5)
UNKNOWN_KID_RELOADS = 10
UNKNOWN_KID_REFILL = timedelta(seconds=1)


class KeySource(Protocol):
    async def public_keys(self) -> Sequence[Mapping[str, Any]]:
        """Every published public key as a JWK (RFC 7517) carrying its ``kid``."""
        ...


@dataclass(frozen=True)
class _Loaded:
    keys: Mapping[str, EllipticCurvePublicKey]
    document: bytes
    at: datetime


class KeySet:
    """Public keys by kid, read through ``source`` and cached as the module says."""

    def __init__(self, source: KeySource, registry: CollectorRegistry) -> None:
        self._source = source
        self._loaded: _Loaded | None = None
        self._lock = asyncio.Lock()
        self._reloads_left = float(UNKNOWN_KID_RELOADS)
        self._refilled_at: datetime | None = None
        self._loads = Counter(
            "pin_auth_key_set_loads_total",
            "Reads of the token verification keys from the database",
            registry=registry,
        )

    async def key(self, kid: str, now: datetime) -> EllipticCurvePublicKey | None:
        """The public key ``kid`` names, or None when no published key has that kid."""
        loaded = await self._fresh(now)
        found = loaded.keys.get(kid)
        if found is not None:
            return found
        async with self._lock:
            if self._loaded is not loaded:  # another caller read the set meanwhile
                return self._current().keys.get(kid)
            if not self._take_unknown_kid_reload(now):
                return None
            return (await self._load(now)).keys.get(kid)

    async def document(self, now: datetime) -> bytes:
        """The JWKS document (``{"keys": [...]}``) of the current set, as bytes."""
        return (await self._fresh(now)).document

    async def _fresh(self, now: datetime) -> _Loaded:
        loaded = self._loaded
        if loaded is not None and not _stale(loaded, now):
            return loaded
        async with self._lock:
            loaded = self._loaded
            if loaded is not None and not _stale(loaded, now):
                return loaded
            return await self._load(now)

    def _current(self) -> _Loaded:
        assert self._loaded is not None
        return self._loaded

    def _take_unknown_kid_reload(self, now: datetime) -> bool:
        if self._refilled_at is not None and now > self._refilled_at:
            earned = (now - self._refilled_at) / UNKNOWN_KID_REFILL
            self._reloads_left = min(float(UNKNOWN_KID_RELOADS), self._reloads_left + earned)
        self._refilled_at = now
        if self._reloads_left < 1:
            return False
        self._reloads_left -= 1
        return True

    async def _load(self, now: datetime) -> _Loaded:
        jwks = [dict(jwk) for jwk in await self._source.public_keys()]
        self._loads.inc()
        previous = self._loaded.keys if self._loaded is not None else {}
        keys: dict[str, EllipticCurvePublicKey] = {}
        for jwk in jwks:
            kid = str(jwk["kid"])
            # A key parsed once is kept: the set changes once a month, it is read every 5 s.
            keys[kid] = previous.get(kid) or _public_key(jwk)
        document = json.dumps({"keys": jwks}, separators=(",", ":")).encode()
        self._loaded = _Loaded(keys, document, now)
        return self._loaded


def _stale(loaded: _Loaded, now: datetime) -> bool:
    return now - loaded.at >= MAX_AGE or now < loaded.at


def _public_key(jwk: Mapping[str, Any]) -> EllipticCurvePublicKey:
    key = ECAlgorithm.from_jwk(dict(jwk))
    if not isinstance(key, EllipticCurvePublicKey):
        raise ValueError("a published key must be an EC public key")
    return key

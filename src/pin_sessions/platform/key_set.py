"""The public keys that verify tokens, cached in process (SPEC §8, §11).

Identity keeps the signing keys; every process verifies with their public halves, read
through the :class:`KeySource` port (identity implements it, the composition root wires
it) and kept here as a :class:`~pin_sessions.platform.refreshed.RefreshedCopy`:

* requests verify with the last good copy and never wait on a read of it: the set is
  read again in the background once the copy is :data:`REFRESH_AFTER` old, so a key
  deleted by ``keys rotate --now`` stops verifying everywhere within :data:`MAX_AGE`
  while the database answers. A read that fails or stalls keeps the copy; its age is
  ``pin_auth_key_set_age_seconds``;
* a token naming a kid the copy lacks (a key created a moment ago) asks for a read begun
  after it arrived and waits for it, bounded — but from a bucket of
  :data:`UNKNOWN_KID_RELOADS` reloads refilled one per :data:`UNKNOWN_KID_REFILL`, so a
  storm of tokens with made-up kids costs the database a few reads, not one per request;
* concurrent callers share one read (single flight); only a process with no copy yet
  waits for one, at most ``wait_limit``;
* the JWKS document (``GET /.well-known/jwks.json``) is rendered once per read of the set
  and served from the copy;
* the tokens its keys verified are kept in :attr:`KeySet.verified_tokens`
  (:mod:`~pin_sessions.platform.verified_tokens`), each usable only while its kid is in
  the set.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from cryptography.hazmat.primitives.asymmetric.ec import EllipticCurvePublicKey
from jwt.algorithms import ECAlgorithm
from prometheus_client import CollectorRegistry, Counter, Gauge

from pin_sessions.platform.clock import Clock
from pin_sessions.platform.refreshed import RefreshedCopy
from pin_sessions.platform.verified_tokens import CAPACITY as TOKEN_CACHE_CAPACITY
from pin_sessions.platform.verified_tokens import VerifiedTokens

# Read every 2 s: a copy in use is at most a tick later plus the read's time older, which
# leaves a read 2.5 s to finish within MAX_AGE.
REFRESH_AFTER = timedelta(seconds=2)
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


class KeySet:
    """Public keys by kid, read through ``source`` and cached as the module says."""

    def __init__(
        self,
        source: KeySource,
        registry: CollectorRegistry,
        *,
        clock: Clock,
        wait_limit: timedelta,
        token_cache_capacity: int = TOKEN_CACHE_CAPACITY,
    ) -> None:
        self._source = source
        # The tokens these keys verified: an entry holds only while its key is in the set,
        # and every verifier of the process shares it (one cache, one pair of counters).
        self.verified_tokens = VerifiedTokens(registry, token_cache_capacity)
        self._reloads_left = float(UNKNOWN_KID_RELOADS)
        self._refilled_at: datetime | None = None
        self._loads = Counter(
            "pin_auth_key_set_loads_total",
            "Reads of the token verification keys from the database",
            registry=registry,
        )
        age = Gauge(
            "pin_auth_key_set_age_seconds",
            "Age of the token verification keys in use (read again every 2 s)",
            registry=registry,
            # Under serve --workers N: the oldest copy among the live workers.
            multiprocess_mode="livemax",
        )
        self._copy = RefreshedCopy(
            "key set",
            self._load,
            clock=clock,
            refresh_after=REFRESH_AFTER,
            wait_limit=wait_limit,
            age=age,
        )

    def start(self) -> None:
        """Read the set in the background from now on (requests start it too)."""
        self._copy.start()

    async def close(self) -> None:
        await self._copy.close()

    async def key(self, kid: str, now: datetime) -> EllipticCurvePublicKey | None:
        """The public key ``kid`` names, or None when no published key has that kid."""
        found = (await self._copy.get()).value.keys.get(kid)
        if found is not None or not self._take_unknown_kid_reload(now):
            return found
        return (await self._copy.read_now()).value.keys.get(kid)

    async def document(self) -> bytes:
        """The JWKS document (``{"keys": [...]}``) of the current set, as bytes."""
        return (await self._copy.get()).value.document

    def _take_unknown_kid_reload(self, now: datetime) -> bool:
        if self._refilled_at is not None and now > self._refilled_at:
            earned = (now - self._refilled_at) / UNKNOWN_KID_REFILL
            self._reloads_left = min(float(UNKNOWN_KID_RELOADS), self._reloads_left + earned)
        self._refilled_at = now
        if self._reloads_left < 1:
            return False
        self._reloads_left -= 1
        return True

    async def _load(self) -> _Loaded:
        jwks = [dict(jwk) for jwk in await self._source.public_keys()]
        self._loads.inc()
        previous = self._copy.current
        known = previous.value.keys if previous is not None else {}
        keys: dict[str, EllipticCurvePublicKey] = {}
        for jwk in jwks:
            kid = str(jwk["kid"])
            # A key parsed once is kept: the set changes once a month, it is read every 2 s.
            keys[kid] = known.get(kid) or _public_key(jwk)
        document = json.dumps({"keys": jwks}, separators=(",", ":")).encode()
        return _Loaded(keys, document)


def _public_key(jwk: Mapping[str, Any]) -> EllipticCurvePublicKey:
    key = ECAlgorithm.from_jwk(dict(jwk))
    if not isinstance(key, EllipticCurvePublicKey):
        raise ValueError("a published key must be an EC public key")
    return key

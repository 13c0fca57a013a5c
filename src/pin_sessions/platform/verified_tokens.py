"""Tokens whose signature already held, kept so a reused token is not verified again.

A client sends the same access token with every request for its 15 minutes, and checking
its ES256 signature costs more than the rest of a heartbeat. So a token that verified is
kept here by its exact text, with what it said and the kid of the key that verified it.
The verifier uses an entry only while that kid is still a key of the key set (asked on
every use, so a key dropped from the set stops its tokens at once) and judges the
token's lifetime against each request's ``now`` as if it were new. Only tokens that
verified are ever kept: a forged one is checked, refused, and forgotten.

Bounded: at most :data:`CAPACITY` tokens, the least recently used leaving first (about
1 KB each). Hits and misses are counted in ``pin_auth_token_cache_hits_total`` and
``pin_auth_token_cache_misses_total``.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING, NamedTuple

from prometheus_client import CollectorRegistry, Counter

if TYPE_CHECKING:
    from pin_sessions.platform.tokens import VerifiedToken

# Tokens live 15 minutes: 16,384 covers a process serving ~18 distinct signed-in
# clients a second, every one of them reusing its token for its whole life.
CAPACITY = 16_384


class CachedToken(NamedTuple):
    verified: VerifiedToken
    kid: str


class VerifiedTokens:
    """At most ``capacity`` verified tokens by their text, least recently used out first."""

    def __init__(self, registry: CollectorRegistry, capacity: int = CAPACITY) -> None:
        self._entries: OrderedDict[str, CachedToken] = OrderedDict()
        self._capacity = capacity
        self._hits = Counter(
            "pin_auth_token_cache_hits_total",
            "Bearer tokens whose signature was not checked again: verified before, key still known",
            registry=registry,
        )
        self._misses = Counter(
            "pin_auth_token_cache_misses_total",
            "Bearer tokens not found among the verified ones, their signature checked",
            registry=registry,
        )

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, token: str) -> CachedToken | None:
        """The entry of ``token`` (now the most recently used), or None, counted either way."""
        found = self._entries.get(token)
        if found is None:
            self._misses.inc()
            return None
        self._entries.move_to_end(token)
        self._hits.inc()
        return found

    def put(self, token: str, entry: CachedToken) -> None:
        """Keep a token that verified, evicting the least recently used past the bound."""
        self._entries[token] = entry
        self._entries.move_to_end(token)
        while len(self._entries) > self._capacity:
            self._entries.popitem(last=False)

    def forget(self, token: str) -> None:
        self._entries.pop(token, None)

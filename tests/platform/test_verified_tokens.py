"""The cache of verified tokens: a reused token skips its signature check, nothing else.

An entry answers only while its token is in time at the request's ``now`` and its key is
still in the key set; only tokens that verified enter it, and it keeps at most its bound.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import timedelta

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from prometheus_client import CollectorRegistry

from pin_sessions.bootstrap.keys import build_signing_key_operations
from pin_sessions.identity.keys import PublishedKeys
from pin_sessions.platform.clock import FixedClock
from pin_sessions.platform.key_set import REFRESH_AFTER, KeySet
from pin_sessions.platform.runtime import Runtime
from pin_sessions.platform.tokens import (
    InvalidToken,
    MachinePrincipal,
    TokenVerifier,
    VerifiedToken,
)
from pin_sessions.platform.verified_tokens import CachedToken, VerifiedTokens
from pin_sessions.settings import DEFAULT_PUBLIC_URL
from tests.conftest import T0
from tests.support.tokens import Tokens
from tests.support.waiting import wait_until

USER, SESSION = uuid.uuid4(), uuid.uuid4()
HITS, MISSES = "pin_auth_token_cache_hits_total", "pin_auth_token_cache_misses_total"


@pytest.fixture
async def keys(runtime: Runtime) -> AsyncIterator[KeySet]:
    keys = KeySet(
        PublishedKeys(runtime.database),
        runtime.registry,
        clock=runtime.clock,
        wait_limit=timedelta(seconds=10),
    )
    yield keys
    await keys.close()


@pytest.fixture
def verifier(keys: KeySet) -> TokenVerifier:
    return TokenVerifier(keys, DEFAULT_PUBLIC_URL)


def _count(registry: CollectorRegistry, name: str) -> float:
    return registry.get_sample_value(name) or 0.0


async def test_a_reused_token_is_answered_from_the_cache_with_the_same_content(
    runtime: Runtime, verifier: TokenVerifier, keys: KeySet, registry: CollectorRegistry
) -> None:
    token = await Tokens.of(runtime).access(USER, SESSION, now=T0, permissions=["dev-stats.view"])
    first = await verifier.verify(token, now=T0)
    hits = _count(registry, HITS)
    again = await verifier.verify(token, now=T0 + timedelta(minutes=14))
    assert again == first
    assert _count(registry, HITS) == hits + 1
    # Another verifier on the same key set (introspection's) shares the entry.
    assert await TokenVerifier(keys, DEFAULT_PUBLIC_URL).verify(token, now=T0) == first
    assert _count(registry, HITS) == hits + 2


async def test_a_cached_token_is_refused_once_expired_or_before_its_issue(
    runtime: Runtime, verifier: TokenVerifier
) -> None:
    token = await Tokens.of(runtime).access(USER, SESSION, now=T0)
    await verifier.verify(token, now=T0)
    with pytest.raises(InvalidToken, match="expired"):
        await verifier.verify(token, now=T0 + timedelta(minutes=15))
    with pytest.raises(InvalidToken, match="future"):
        await verifier.verify(token, now=T0 - timedelta(minutes=1))
    assert await verifier.verify(token, now=T0 + timedelta(minutes=1))


async def test_a_cached_token_is_refused_once_its_key_left_the_key_set(
    runtime: Runtime, verifier: TokenVerifier, keys: KeySet, clock: FixedClock
) -> None:
    token = await Tokens.of(runtime).access(USER, SESSION, now=T0)
    await verifier.verify(token, now=T0)
    assert len(keys.verified_tokens) == 1
    # keys rotate --now: the leaked key is deleted, a new one is Current.
    _, deleted = await build_signing_key_operations(runtime).rotate_now(T0)
    assert deleted == [jwt.get_unverified_header(token)["kid"]]
    clock.advance(REFRESH_AFTER)  # the copy in use is read again in the background
    refusals: list[str] = []

    async def refused() -> bool:
        try:
            await verifier.verify(token, now=clock.now())
        except InvalidToken as exc:
            refusals.append(str(exc))
            return True
        return False

    await wait_until(refused, timeout=10)
    assert refusals == ["the token's signing key is unknown"]
    assert len(keys.verified_tokens) == 0


async def test_a_forged_token_never_enters_the_cache(
    runtime: Runtime, verifier: TokenVerifier, keys: KeySet, registry: CollectorRegistry
) -> None:
    real = await Tokens.of(runtime).access(USER, SESSION, now=T0)
    header = jwt.get_unverified_header(real)
    claims = jwt.decode(real, options={"verify_signature": False})
    # The real kid and claims, signed by a key the service never had.
    forged = jwt.encode(
        claims, ec.generate_private_key(ec.SECP256R1()), algorithm="ES256", headers=header
    )
    misses = _count(registry, MISSES)
    for _ in range(2):
        with pytest.raises(InvalidToken):
            await verifier.verify(forged, now=T0)
    assert len(keys.verified_tokens) == 0
    assert _count(registry, MISSES) == misses + 2


def _entry(client: str) -> CachedToken:
    principal = MachinePrincipal(client, frozenset({"admin"}))
    return CachedToken(VerifiedToken(principal, client, T0, T0 + timedelta(minutes=15)), "k")


def test_the_cache_keeps_its_bound_evicting_the_least_recently_used() -> None:
    cache = VerifiedTokens(CollectorRegistry(), capacity=2)
    cache.put("a", _entry("a"))
    cache.put("b", _entry("b"))
    assert cache.get("a") == _entry("a")  # "a" is now the most recently used
    cache.put("c", _entry("c"))
    assert len(cache) == 2
    assert (cache.get("a"), cache.get("b"), cache.get("c")) == (_entry("a"), None, _entry("c"))

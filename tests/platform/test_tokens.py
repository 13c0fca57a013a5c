"""Token verification (SPEC §3, §4, §8): only our ES256 tokens, of the right kind, in time.

Each token here is made with the real Current key (or a key the service never had) and
then bent one way; the verifier must refuse every bent one with ``InvalidToken``.
"""

from __future__ import annotations

import hmac
import json
import uuid
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from jwt.utils import base64url_encode
from prometheus_client import CollectorRegistry

from pin_sessions.identity import repository
from pin_sessions.identity.keys import KeyCipher, PublishedKeys
from pin_sessions.platform.key_set import KeySet
from pin_sessions.platform.runtime import Runtime
from pin_sessions.platform.tokens import (
    InvalidToken,
    MachinePrincipal,
    Refusal,
    TokenVerifier,
    UserPrincipal,
)
from pin_sessions.settings import DEFAULT_PUBLIC_URL
from tests.conftest import T0
from tests.support.tokens import Tokens

USER, SESSION = uuid.uuid4(), uuid.uuid4()


@pytest.fixture
async def signing(runtime: Runtime) -> tuple[str, ec.EllipticCurvePrivateKey]:
    """The Current key, made by minting a first token, and its private half."""
    await Tokens.of(runtime).access(USER, SESSION, now=T0)
    async with runtime.database.connection() as conn:
        row = await repository.current_signing_key(conn)
    assert row is not None
    return row["kid"], KeyCipher(runtime.secrets).open(row["kid"], row["private_key"])


@pytest.fixture
async def verifier(runtime: Runtime) -> AsyncIterator[TokenVerifier]:
    keys = KeySet(
        PublishedKeys(runtime.database),
        CollectorRegistry(),
        clock=runtime.clock,
        wait_limit=timedelta(seconds=10),
    )
    yield TokenVerifier(keys, DEFAULT_PUBLIC_URL)
    await keys.close()


def _claims(**changes: Any) -> dict[str, Any]:
    claims: dict[str, Any] = {
        "iss": DEFAULT_PUBLIC_URL,
        "aud": "pin-api",
        "sub": str(USER),
        "sid": str(SESSION),
        "jti": "j",
        "iat": int(T0.timestamp()),
        "exp": int((T0 + timedelta(minutes=15)).timestamp()),
    }
    claims.update(changes)
    return {name: value for name, value in claims.items() if value is not None}


async def test_real_tokens_of_both_kinds_verify(runtime: Runtime, verifier: TokenVerifier) -> None:
    tokens = Tokens.of(runtime)
    user = await verifier.verify(
        await tokens.access(USER, SESSION, now=T0, permissions=["dev-stats.view"]), now=T0
    )
    assert user.principal == UserPrincipal(
        USER, SESSION, frozenset({"dev-stats.view"}), issued_at=T0, auth_time=T0
    )
    service = await verifier.verify(await tokens.m2m("crm", ["admin"], now=T0), now=T0)
    assert service.principal == MachinePrincipal("crm", frozenset({"admin"}))
    assert (service.audience, service.expires_at) == ("pin-internal", T0 + timedelta(minutes=15))


@pytest.mark.parametrize(
    ("claims", "header", "reason"),
    [
        (_claims(iss="https://someone-else.example"), {}, Refusal.ISSUER),
        # A user's claims under the services' audience, and without client_id.
        (_claims(aud="pin-internal"), {}, Refusal.AUDIENCE),
        (_claims(aud="pin-internal", sid=None), {}, Refusal.MALFORMED),
        (_claims(aud=["pin-api", "pin-internal"]), {}, Refusal.AUDIENCE),
        # A service's claims under the users' audience.
        (_claims(sid=None, sub="crm", client_id="crm", scope="admin"), {}, Refusal.AUDIENCE),
        (
            _claims(aud="pin-internal", sid=None, client_id="other", sub="crm"),
            {},
            Refusal.MALFORMED,
        ),
        (_claims(aud="another-api"), {}, Refusal.AUDIENCE),
        (_claims(jti=None), {}, Refusal.MALFORMED),
        (_claims(exp=int(T0.timestamp())), {}, Refusal.EXPIRED),  # expired at T0
        (_claims(iat=int((T0 + timedelta(minutes=1)).timestamp())), {}, Refusal.NOT_YET_VALID),
        (_claims(exp=10**20), {}, Refusal.MALFORMED),
        (_claims(sub="not-a-uuid"), {}, Refusal.MALFORMED),
        (_claims(permissions="dev-stats.view"), {}, Refusal.MALFORMED),
        # auth_time after iat, or not a number.
        (_claims(auth_time=int((T0 + timedelta(seconds=1)).timestamp())), {}, Refusal.MALFORMED),
        (_claims(auth_time="2026-11-29T12:00:00Z"), {}, Refusal.MALFORMED),
        (_claims(auth_time=True), {}, Refusal.MALFORMED),
        (_claims(), {"typ": "JWT"}, Refusal.MALFORMED),
        (_claims(), {"kid": None}, Refusal.UNKNOWN_KEY),
        (_claims(), {"kid": "../../etc/passwd"}, Refusal.UNKNOWN_KEY),
    ],
)
async def test_a_bent_token_is_invalid_for_its_reason(
    verifier: TokenVerifier,
    signing: tuple[str, ec.EllipticCurvePrivateKey],
    claims: dict[str, Any],
    header: dict[str, Any],
    reason: Refusal,
) -> None:
    kid, key = signing
    headers = {"kid": kid, "typ": "at+jwt", **header}
    if headers["kid"] is None:
        del headers["kid"]
    token = jwt.encode(claims, key, algorithm="ES256", headers=headers)
    with pytest.raises(InvalidToken) as refused:
        await verifier.verify(token, now=T0)
    assert refused.value.reason is reason


async def test_a_refreshed_token_carries_the_instant_of_its_familys_sign_in(
    runtime: Runtime, verifier: TokenVerifier
) -> None:
    signed_in_at = T0 - timedelta(days=3)
    token = await Tokens.of(runtime).access(USER, SESSION, now=T0, auth_time=signed_in_at)
    principal = (await verifier.verify(token, now=T0)).principal
    assert isinstance(principal, UserPrincipal)
    assert (principal.issued_at, principal.auth_time) == (T0, signed_in_at)
    assert principal.signed_in_at == signed_in_at


async def test_a_token_minted_before_auth_time_existed_is_judged_by_its_issue(
    verifier: TokenVerifier, signing: tuple[str, ec.EllipticCurvePrivateKey]
) -> None:
    """Its sign-in was no later than its iat: the instant it can safely be judged by."""
    kid, key = signing
    token = jwt.encode(_claims(), key, algorithm="ES256", headers={"kid": kid, "typ": "at+jwt"})
    principal = (await verifier.verify(token, now=T0)).principal
    assert isinstance(principal, UserPrincipal)
    assert (principal.auth_time, principal.signed_in_at) == (None, T0)


async def test_no_other_algorithm_is_accepted_not_even_with_the_public_key_as_secret(
    verifier: TokenVerifier, signing: tuple[str, ec.EllipticCurvePrivateKey]
) -> None:
    kid, key = signing
    public_pem = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )

    def made_by_hand(alg: str, sign: Callable[[bytes], bytes]) -> str:
        header = {"alg": alg, "kid": kid, "typ": "at+jwt"}
        signing_input = b".".join(
            base64url_encode(json.dumps(part).encode()) for part in (header, _claims())
        )
        return (signing_input + b"." + base64url_encode(sign(signing_input))).decode()

    confused = made_by_hand("HS256", lambda data: hmac.new(public_pem, data, "sha256").digest())
    unsigned = made_by_hand("none", lambda data: b"")
    for token in (confused, unsigned):
        with pytest.raises(InvalidToken) as refused:
            await verifier.verify(token, now=T0)
        assert refused.value.reason is Refusal.SIGNATURE

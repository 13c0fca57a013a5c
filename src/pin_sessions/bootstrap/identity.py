"""Identity's services: token signing, the key set, the OAuth server and the use cases."""

from __future__ import annotations

from pin_sessions.bootstrap.database import call_bound
from pin_sessions.bootstrap.keys import build_key_cipher
from pin_sessions.identity.client_authentication import ClientAuthentication
from pin_sessions.identity.clients import ServiceClients
from pin_sessions.identity.codes import DEV_CODE_KEY_PURPOSE, DevCodes
from pin_sessions.identity.domain import SignInLimits
from pin_sessions.identity.keys import PublishedKeys
from pin_sessions.identity.liveness import RefreshSessionLiveness
from pin_sessions.identity.oauth import OAuthServer
from pin_sessions.identity.operations import IdentityOperations, random_code
from pin_sessions.identity.signing import TokenSigner
from pin_sessions.platform.key_set import KeySet
from pin_sessions.platform.runtime import Runtime
from pin_sessions.platform.tokens import TokenVerifier


def build_token_signer(runtime: Runtime) -> TokenSigner:
    """Mints every token with the Current signing key, as the public URL (the issuer)."""
    settings = runtime.settings
    return TokenSigner(
        build_key_cipher(runtime),
        settings.effective_public_url,
        m2m_token_ttl=settings.m2m_token_ttl,
    )


def build_key_set(runtime: Runtime) -> KeySet:
    """The process's cache of the published keys: one per process, on its registry."""
    return KeySet(
        PublishedKeys(runtime.database),
        runtime.registry,
        clock=runtime.clock,
        wait_limit=call_bound(runtime),
    )


def build_oauth_server(runtime: Runtime, key_set: KeySet) -> OAuthServer:
    """The token, introspection and metadata endpoints' use cases."""
    return OAuthServer(
        runtime.database,
        ServiceClients(runtime.database),
        ClientAuthentication(
            runtime.database, runtime.settings.oauth.failure_limit, runtime.registry
        ),
        build_token_signer(runtime),
        TokenVerifier(key_set, runtime.settings.effective_public_url),
        RefreshSessionLiveness(runtime.database),
    )


def build_identity_operations(runtime: Runtime) -> IdentityOperations:
    """Identity's use cases; codes go out through ``PIN_SMS__PROVIDER`` within the sign-in
    limits and, with PIN_DEV_CODES=1, are derivable."""
    # The SMS gateways' HTTP client (httpx), imported only by the processes that send codes:
    # the jobs and consumers build keys and tokens from this module too.
    from pin_sessions.identity.sms import build_code_sender

    dev_codes = build_dev_codes(runtime)
    settings = runtime.settings
    return IdentityOperations(
        runtime.database,
        runtime.secrets,
        build_token_signer(runtime),
        build_code_sender(settings, runtime.registry),
        refresh_reuse_interval=settings.refresh_reuse_interval,
        limits=SignInLimits.of(settings.sign_in.per_ip_limit, settings.sign_in.global_limit),
        issue_code=random_code if dev_codes is None else dev_codes.issue,
    )


def build_dev_codes(runtime: Runtime) -> DevCodes | None:
    """The codes ``GET /dev/sign-in-codes/{requestId}`` shows; None unless PIN_DEV_CODES=1."""
    if not runtime.settings.dev_codes:
        return None
    return DevCodes(runtime.database, runtime.secrets.derived_key(DEV_CODE_KEY_PURPOSE))

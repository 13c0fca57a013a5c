"""The signing keys' parts: the signing-keys job and the ``keys`` command build them as the
API does, without identity's sign-in (its SMS client) or anything of HTTP."""

from __future__ import annotations

from pin_sessions.identity.keys import KeyCipher, SigningKeyOperations
from pin_sessions.platform.runtime import Runtime


def build_key_cipher(runtime: Runtime) -> KeyCipher:
    """Seals and opens the signing keys' private halves under a key of the master secret."""
    return KeyCipher(runtime.secrets)


def build_signing_key_operations(runtime: Runtime) -> SigningKeyOperations:
    return SigningKeyOperations(runtime.database, build_key_cipher(runtime))

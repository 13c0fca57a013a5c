"""The master secret and the keys derived from it (SPEC §2 ``PIN_SECRET_KEY``).

The master secret never keys anything itself: every use (code HMACs, refresh successors,
the encryption of signing keys at rest) gets its own key through HKDF-SHA256, so one
derived key leaking opens none of the others. Tokens are signed with asymmetric keys
(``identity.keys``), never with this secret.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from pin_sessions.settings import Settings

# The file name predates the rename to PIN_SECRET_KEY; a development machine keeps its secret.
SECRET_FILE_NAME = "jwt-secret"  # noqa: S105 - a file name, not a secret
DERIVED_KEY_BYTES = 32


@dataclass(frozen=True)
class ServerSecrets:
    """One master secret; each use gets its own key so one leak does not open the others."""

    master: bytes

    def derived_key(self, purpose: str) -> bytes:
        """A 256-bit key for one purpose (``sign-in-code``, ``signing-key-encryption``, ...)."""
        hkdf = HKDF(
            algorithm=hashes.SHA256(),
            length=DERIVED_KEY_BYTES,
            salt=None,
            info=f"pin-sessions/{purpose}".encode(),
        )
        return hkdf.derive(self.master)


def resolve_server_secrets(settings: Settings) -> ServerSecrets:
    """``PIN_SECRET_KEY`` (or ``PIN_JWT_SECRET``) when set; else one generated in ``PIN_DATA_DIR``.

    Production settings refuse to load without it, so the generated secret only ever
    serves development machines.
    """
    configured = settings.master_secret
    if configured is not None:
        return ServerSecrets(configured.get_secret_value().encode())
    return ServerSecrets(_generated_secret(settings.data_dir / SECRET_FILE_NAME))


def _generated_secret(path: Path) -> bytes:
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        # Written aside, then linked into place: link() fails if another process won the
        # race, and nobody ever reads a half-written file.
        candidate = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        candidate.write_text(secrets.token_urlsafe(48))
        candidate.chmod(0o600)
        try:
            os.link(candidate, path)
        except FileExistsError:
            pass
        finally:
            candidate.unlink()
    return path.read_text().strip().encode()

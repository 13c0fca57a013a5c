"""The server secret and the keys derived from it (SPEC §2 ``PIN_JWT_SECRET``)."""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from pin_sessions.settings import Settings

SECRET_FILE_NAME = "jwt-secret"  # noqa: S105 - a file name, not a secret


@dataclass(frozen=True)
class ServerSecrets:
    """One master secret; each use gets its own key so one leak does not open the others."""

    master: bytes

    @property
    def jwt_key(self) -> bytes:
        return self.master

    def derived_key(self, purpose: str) -> bytes:
        """A key for one purpose (``sign-in-code``, ``refresh-successor``, ...)."""
        return hmac.new(self.master, f"pin-sessions/{purpose}".encode(), hashlib.sha256).digest()


def resolve_server_secrets(settings: Settings) -> ServerSecrets:
    """``PIN_JWT_SECRET`` when set; otherwise a secret generated once in ``PIN_DATA_DIR``.

    Production settings refuse to load without ``PIN_JWT_SECRET``, so the generated
    secret only ever serves development machines.
    """
    if settings.jwt_secret is not None:
        return ServerSecrets(settings.jwt_secret.get_secret_value().encode())
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

from __future__ import annotations

import hashlib
import hmac
from pathlib import Path

from pin_sessions.platform.secrets import resolve_server_secrets
from pin_sessions.settings import load_settings


def test_a_dev_secret_is_generated_once_and_kept(tmp_path: Path) -> None:
    settings = load_settings({"PIN_DATA_DIR": str(tmp_path)})
    first = resolve_server_secrets(settings)
    second = resolve_server_secrets(settings)
    assert first == second
    assert len(first.master) >= 32
    assert (tmp_path / "jwt-secret").stat().st_mode & 0o077 == 0


def test_the_configured_secret_wins(tmp_path: Path) -> None:
    settings = load_settings({"PIN_DATA_DIR": str(tmp_path), "PIN_SECRET_KEY": "s" * 40})
    assert resolve_server_secrets(settings).master == b"s" * 40
    assert not (tmp_path / "jwt-secret").exists()


def test_derived_keys_differ_by_purpose(tmp_path: Path) -> None:
    secrets = resolve_server_secrets(load_settings({"PIN_SECRET_KEY": "s" * 40}))
    assert secrets.derived_key("a") != secrets.derived_key("b")
    assert secrets.derived_key("a") != secrets.master


def test_derived_keys_are_hkdf_sha256_of_the_master_secret() -> None:
    """SPEC §2: keys are derived with HKDF; RFC 5869's construction, checked by hand."""
    master = b"s" * 40
    secrets = resolve_server_secrets(load_settings({"PIN_SECRET_KEY": master.decode()}))
    prk = hmac.new(b"\0" * 32, master, hashlib.sha256).digest()
    okm = hmac.new(prk, b"pin-sessions/sign-in-code\x01", hashlib.sha256).digest()
    assert secrets.derived_key("sign-in-code") == okm

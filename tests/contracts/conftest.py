"""The contract tests sign users in over HTTP, reading codes as a client would."""

from __future__ import annotations

import pytest


@pytest.fixture
def settings_env(settings_env: dict[str, str]) -> dict[str, str]:
    return {**settings_env, "PIN_DEV_CODES": "1"}

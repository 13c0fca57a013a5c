"""Identity's tests run the API with PIN_DEV_CODES=1, so they read codes as a client would."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager

import httpx
import pytest

from pin_sessions.bootstrap.api import build_api
from pin_sessions.bootstrap.database import build_runtime
from pin_sessions.platform.clock import FixedClock
from pin_sessions.settings import load_settings
from tests.support.http import in_process

ApiWith = Callable[..., AbstractAsyncContextManager[httpx.AsyncClient]]


@pytest.fixture
def settings_env(settings_env: dict[str, str]) -> dict[str, str]:
    return {**settings_env, "PIN_DEV_CODES": "1"}


@pytest.fixture
def api_with(settings_env: dict[str, str], database_url: str, clock: FixedClock) -> ApiWith:
    """``async with api_with(PIN_X="1") as http:`` — the API in process, on this test's
    database and clock, with some settings changed."""

    @contextlib.asynccontextmanager
    async def api(**overrides: str) -> AsyncIterator[httpx.AsyncClient]:
        settings = load_settings({**settings_env, **overrides})
        async with in_process(
            build_api(build_runtime(settings, database_url, clock=clock))
        ) as http:
            yield http

    return api

"""The OpenAPI document tells the truth: schemathesis calls every operation over real HTTP.

Each answer must be no server error, and be what the document declares for that
operation: a documented status code, its content type, a body matching its schema and the
headers it promises (``WWW-Authenticate`` on 401, ``Retry-After`` on 429). Cases come both
from what the document allows and from what it forbids, so refusals are held to the
document too. Three passes over every operation, each as a different caller: nobody, a
signed-in user (holding both manager permissions, from a device with a session), and a
service (an m2m token with both internal scopes). The API runs with the development routes
mounted, so they are documented and called too.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import httpx
import hypothesis
import pytest
import schemathesis
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from pin_sessions.bootstrap.database import build_runtime
from pin_sessions.platform.database import Database
from pin_sessions.settings import Settings
from tests.conftest import T0
from tests.support.tokens import Tokens
from tests.support.users import signed_in_user

PERMISSIONS = ("dev-stats.view", "user-activity.history.view-by-user")
INTERNAL_SCOPES = ("user-activity.internal", "admin")
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    response_headers_conformance,
]
DEV_OPERATIONS = {("GET", "/dev/sign-in-codes/{requestId}"), ("POST", "/dev/dev-stats/viewers")}
# A fixed sequence of cases by default, so CI never fails on a case no earlier run saw;
# PIN_FUZZ_RANDOM=1 explores new cases (and PIN_FUZZ_EXAMPLES more of them) when hunting.
DERANDOMIZE = os.environ.get("PIN_FUZZ_RANDOM") != "1"
FUZZ_EXAMPLES = int(os.environ.get("PIN_FUZZ_EXAMPLES", "12"))

Credentials = Callable[[], dict[str, str]]
T = TypeVar("T")


@pytest.fixture
def settings_env(settings_env: dict[str, str]) -> dict[str, str]:
    """The development routes are part of the API a dev server documents: fuzz them too."""
    return {**settings_env, "PIN_DEV_CODES": "1"}


async def _with_tokens(
    settings: Settings, database_url: str, use: Callable[[Tokens], Awaitable[T]]
) -> T:
    """``use`` with tokens minted by the test database's Current key."""
    runtime = build_runtime(settings, database_url, database=Database(database_url, max_size=1))
    await runtime.database.open()
    try:
        return await use(Tokens.of(runtime))
    finally:
        await runtime.database.close()


def test_every_operation_answers_as_documented_to_a_caller_without_credentials(
    api_url: str,
) -> None:
    _fuzz_every_operation(api_url, dict)


def test_every_operation_answers_as_documented_to_a_signed_in_user(
    settings: Settings, database_url: str, api_url: str
) -> None:
    # A fresh user per operation keeps logout from locking the fuzzer out of the next one.
    _fuzz_every_operation(api_url, lambda: _user_headers(settings, database_url, api_url))


def test_every_operation_answers_as_documented_to_a_service(
    settings: Settings, database_url: str, api_url: str
) -> None:
    async def mint(tokens: Tokens) -> str:
        return await tokens.m2m("fuzz", INTERNAL_SCOPES, now=T0)

    token = asyncio.run(_with_tokens(settings, database_url, mint))
    _fuzz_every_operation(api_url, lambda: {"Authorization": f"Bearer {token}"})


def _fuzz_every_operation(api_url: str, credentials: Credentials) -> None:
    schema = schemathesis.openapi.from_url(f"{api_url}/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]  # type: ignore[union-attr]
    called = {(operation.method.upper(), operation.path) for operation in operations}
    assert len(called) >= 23
    assert called >= DEV_OPERATIONS
    for operation in operations:
        _fuzz(operation, credentials())


def _user_headers(settings: Settings, database_url: str, api_url: str) -> dict[str, str]:
    async def sign_in(tokens: Tokens) -> dict[str, str]:
        async with tokens.database.transaction() as conn:
            user = await signed_in_user(conn, tokens.signer, now=T0, permissions=PERMISSIONS)
        return user.headers

    headers = asyncio.run(_with_tokens(settings, database_url, sign_in))
    started = httpx.post(f"{api_url}/api/user-activity/sessions/start", headers=headers)
    assert started.status_code == 200, started.text
    return {**headers, "X-Anonymous-Id": started.json()["anonymousId"]}


def _fuzz(operation: Any, headers: dict[str, str]) -> None:
    cases = operation.as_strategy() | operation.as_strategy(GenerationMode.NEGATIVE)

    @hypothesis.given(case=cases)
    @hypothesis.settings(
        max_examples=FUZZ_EXAMPLES,
        derandomize=DERANDOMIZE,
        # No example database: a run's cases come from its seed alone, the same everywhere.
        database=None,
        deadline=None,
        suppress_health_check=list(hypothesis.HealthCheck),
    )
    def answers_as_documented(case: Any) -> None:
        case.call_and_validate(headers=headers, checks=CHECKS)

    answers_as_documented()

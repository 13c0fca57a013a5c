"""Never a 500: schemathesis fuzzes every operation of the OpenAPI document over real HTTP.

Each operation is called with credentials that get it past authentication — a fresh
signed-in user holding both manager permissions, from a device with a session, or an m2m
token for the internal routes — so the fuzzer reaches validation and the operations.
A fresh user per operation keeps logout from locking the fuzzer out of the next one.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import httpx
import hypothesis
import schemathesis
from schemathesis.checks import not_a_server_error

from pin_sessions.platform.auth import TokenCodec
from pin_sessions.platform.database import Database
from pin_sessions.settings import Settings
from tests.conftest import T0
from tests.support.users import signed_in_user

PERMISSIONS = ("dev-stats.view", "user-activity.history.view-by-user")
INTERNAL_SCOPES = ("user-activity.internal", "admin")
# A fixed sequence of cases by default, so CI never fails on a case no earlier run saw;
# PIN_FUZZ_RANDOM=1 explores new cases (and PIN_FUZZ_EXAMPLES more of them) when hunting.
DERANDOMIZE = os.environ.get("PIN_FUZZ_RANDOM") != "1"
FUZZ_EXAMPLES = int(os.environ.get("PIN_FUZZ_EXAMPLES", "25"))


def _codec(settings: Settings) -> TokenCodec:
    assert settings.jwt_secret is not None
    return TokenCodec(settings.jwt_secret.get_secret_value().encode())


def _user_headers(settings: Settings, database_url: str, api_url: str) -> dict[str, str]:
    async def sign_in() -> dict[str, str]:
        database = Database(database_url, max_size=1)
        await database.open()
        try:
            async with database.transaction() as conn:
                user = await signed_in_user(conn, _codec(settings), now=T0, permissions=PERMISSIONS)
        finally:
            await database.close()
        return user.headers

    headers = asyncio.run(sign_in())
    started = httpx.post(f"{api_url}/api/user-activity/sessions/start", headers=headers)
    assert started.status_code == 200, started.text
    return {**headers, "X-Anonymous-Id": started.json()["anonymousId"]}


def test_no_request_the_schema_allows_gets_a_server_error(
    settings: Settings, database_url: str, api_url: str
) -> None:
    schema = schemathesis.openapi.from_url(f"{api_url}/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]  # type: ignore[union-attr]
    assert len(operations) >= 20
    m2m_token = _codec(settings).issue_m2m_token("fuzz", INTERNAL_SCOPES, now=T0)
    m2m = {"Authorization": f"Bearer {m2m_token}"}

    for operation in operations:
        if operation.path.startswith("/internal/"):
            _fuzz(operation, m2m)
        else:
            _fuzz(operation, _user_headers(settings, database_url, api_url))


def _fuzz(operation: Any, headers: dict[str, str]) -> None:
    @hypothesis.given(case=operation.as_strategy())
    @hypothesis.settings(
        max_examples=FUZZ_EXAMPLES,
        derandomize=DERANDOMIZE,
        # No example database: a run's cases come from its seed alone, the same everywhere.
        database=None,
        deadline=None,
        suppress_health_check=list(hypothesis.HealthCheck),
    )
    def no_server_error(case: Any) -> None:
        case.call_and_validate(headers=headers, checks=[not_a_server_error])

    no_server_error()

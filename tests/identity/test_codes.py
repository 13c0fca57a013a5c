"""Code delivery: the CodeSender port, the development ``log`` gateway, and the dev-only code
endpoint. The SMS gateways themselves are tested in ``test_sms_gateways.py``."""

from __future__ import annotations

import json
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry

from pin_sessions.bootstrap.api import build_api
from pin_sessions.bootstrap.database import build_runtime
from pin_sessions.bootstrap.identity import build_token_signer
from pin_sessions.identity import domain
from pin_sessions.identity.domain import SignInLimits
from pin_sessions.identity.operations import CODE_KEY_PURPOSE, IdentityOperations
from pin_sessions.identity.sms import build_code_sender
from pin_sessions.platform.clock import FixedClock
from pin_sessions.platform.metrics import new_registry
from pin_sessions.platform.runtime import Runtime
from pin_sessions.settings import DEFAULT_PUBLIC_URL, SettingsError, load_settings
from tests.conftest import T0, TEST_SECRET_KEY, LogCapture
from tests.identity.flows import dev_code, new_phone, problem_code, request_code
from tests.support.http import LiveServer


class RecordingSmsSender:
    """A fake SMS gateway: remembers what it was asked to deliver."""

    def __init__(self) -> None:
        self.sent: list[tuple[uuid.UUID, str, str]] = []

    async def send(
        self, request_id: uuid.UUID, phone_number: str, code: str, now: datetime
    ) -> None:
        del now
        self.sent.append((request_id, phone_number, code))


async def test_the_sender_gets_the_code_that_only_its_hmac_is_stored_for(
    runtime: Runtime,
) -> None:
    sms = RecordingSmsSender()
    operations = IdentityOperations(
        runtime.database,
        runtime.secrets,
        build_token_signer(runtime),
        sms,
        refresh_reuse_interval=runtime.settings.refresh_reuse_interval,
        limits=SignInLimits.of(per_ip_limit=20, global_limit=600),
    )
    phone = new_phone()
    created = await operations.request_sign_in(phone, None, T0)
    [(request_id, sent_to, code)] = sms.sent
    assert (request_id, sent_to) == (created.request_id, phone)
    async with runtime.database.connection() as conn:
        stored = await conn.fetchval(
            "select code_hash from identity.sign_in_confirmation_requests where id = $1",
            request_id,
        )
    key = runtime.secrets.derived_key(CODE_KEY_PURPOSE)
    assert stored == domain.code_hash(key, request_id, code)


def _sent_lines(logs: LogCapture, request_id: str) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in logs.lines() if line.startswith("{")]
    return [
        line
        for line in lines
        if line.get("event") == "sign-in code sent" and line.get("requestId") == request_id
    ]


async def test_in_dev_the_log_gateways_line_is_the_phone_code_and_page_but_no_number(
    http: httpx.AsyncClient, captured_logs: LogCapture
) -> None:
    phone = new_phone()
    request_id = await request_code(http, phone)
    [line] = _sent_lines(captured_logs, request_id)
    code = await dev_code(http, request_id)
    assert line["provider"] == "log"
    assert line["devCode"] == code
    # The page on the public URL that shows the code again.
    page = line["devCodeUrl"]
    assert page == f"{DEFAULT_PUBLIC_URL}/dev/sign-in-codes/{request_id}"
    assert (await http.get(page.removeprefix(DEFAULT_PUBLIC_URL))).json() == {"code": code}
    assert phone[1:] not in json.dumps(line)


@pytest.mark.parametrize(
    ("environ", "shown"),
    [
        ({}, {"devCode"}),  # `serve` in dev: the code, and no page that is not served
        ({"PIN_DEV_CODES": "1"}, {"devCode", "devCodeUrl"}),
        ({"PIN_ENV": "prod", "PIN_DATABASE_URL": "postgresql://db"}, set()),
    ],
)
async def test_only_dev_with_the_log_gateway_logs_a_code(
    captured_logs: LogCapture, environ: dict[str, str], shown: set[str]
) -> None:
    """The real gateways never log it either (test_sms_gateways.py reads their lines)."""
    settings = load_settings({"PIN_SECRET_KEY": TEST_SECRET_KEY, **environ})
    sender = build_code_sender(settings, new_registry())
    request_id = uuid.uuid4()
    await sender.send(request_id, "+447911123456", "424242", T0)
    [line] = _sent_lines(captured_logs, str(request_id))
    assert shown == {"devCode", "devCodeUrl"} & line.keys()
    assert ("424242" in json.dumps(line)) is bool(shown)
    assert "7911123456" not in json.dumps(line)


async def test_a_dev_server_shows_codes_without_storing_them(
    http: httpx.AsyncClient, runtime: Runtime
) -> None:
    """SPEC §3: the code itself is never stored, not even where PIN_DEV_CODES=1 shows it."""
    request_id = await request_code(http, new_phone())
    code = await dev_code(http, request_id)
    assert (await http.get(f"/dev/sign-in-codes/{request_id}")).json() == {"code": code}
    async with runtime.database.connection() as conn:
        tables = await conn.fetch(
            "select table_schema, table_name from information_schema.tables "
            "where table_schema in ('identity', 'messaging')"
        )
        rows = [
            row["text"]
            for table in tables
            for row in await conn.fetch(
                f'select t::text as text from "{table["table_schema"]}"."{table["table_name"]}" t'
            )
        ]
    assert any(request_id in text for text in rows)  # the scan does see the request
    assert not any(code in text for text in rows)


async def test_the_dev_code_of_an_unknown_request_is_not_found(http: httpx.AsyncClient) -> None:
    response = await http.get(f"/dev/sign-in-codes/{uuid.uuid4()}")
    assert response.status_code == 404
    assert problem_code(response) == "IDENTITY_CONFIRMATION_NOT_FOUND"


async def test_without_dev_codes_the_code_endpoint_does_not_exist(
    settings_env: dict[str, str], database_url: str, clock: FixedClock
) -> None:
    settings = load_settings({**settings_env, "PIN_DEV_CODES": "0"})
    runtime = build_runtime(settings, database_url, clock=clock, registry=CollectorRegistry())
    with LiveServer(build_api(runtime)) as url:
        async with httpx.AsyncClient(base_url=url) as http:
            request_id = await request_code(http, new_phone())
            response = await http.get(f"/dev/sign-in-codes/{request_id}")
            # The generic routing 404, not the endpoint's own "no such request".
            assert response.status_code == 404
            assert problem_code(response) == "NOT_FOUND"


def test_dev_codes_are_refused_in_prod(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="PIN_DEV_CODES"):
        load_settings(
            {
                "PIN_ENV": "prod",
                "PIN_DEV_CODES": "1",
                "PIN_SECRET_KEY": TEST_SECRET_KEY,
                "PIN_DATABASE_URL": "postgresql://pin@db/pin",
                "PIN_DATA_DIR": str(tmp_path),
            }
        )

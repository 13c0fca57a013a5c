"""SPEC §11: failed client authentication at /oauth/token and /oauth/introspect counts per
client id and per client address, ``PIN_OAUTH__FAILURE_LIMIT`` a minute; past it, 429 with
``Retry-After`` in the endpoints' own RFC 6749 JSON — a right secret included. Counted in
PostgreSQL, so several API processes hold the limit together; failures are logged at most
once a minute per client id."""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import re
import subprocess
import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import asyncpg
import httpx
import pytest

from pin_sessions.identity.client_authentication import FailureLog, FailureReason
from pin_sessions.identity.clients import ServiceClients
from pin_sessions.identity.repository.loaded import QUERIES
from pin_sessions.platform.clock import FixedClock
from pin_sessions.platform.ids import new_id
from pin_sessions.platform.runtime import Runtime
from tests.conftest import T0, LogCapture
from tests.identity.conftest import ApiWith
from tests.support.processes import free_port, pin_sessions, wait_until_ready

TOKEN = "/oauth/token"
INTROSPECT = "/oauth/introspect"
GRANT = {"grant_type": "client_credentials"}
LIMIT = "3"


@pytest.fixture
def settings_env(settings_env: dict[str, str]) -> dict[str, str]:
    # The in-process client connects from 127.0.0.1, which forwards the client's address.
    return {**settings_env, "PIN_TRUSTED_PROXIES": "127.0.0.1"}


class Registered:
    def __init__(self, client_id: uuid.UUID, secret: str) -> None:
        self.client_id = str(client_id)
        self.secret = secret


@pytest.fixture
async def client(runtime: Runtime) -> Registered:
    created, secret = await ServiceClients(runtime.database).create(
        "reports", ["admin"], runtime.clock.now()
    )
    return Registered(created.client_id, secret)


@pytest.fixture
async def other_client(runtime: Runtime) -> Registered:
    created, secret = await ServiceClients(runtime.database).create(
        "audit", ["admin"], runtime.clock.now()
    )
    return Registered(created.client_id, secret)


def _basic(client_id: str, secret: str) -> str:
    return "Basic " + base64.b64encode(f"{client_id}:{secret}".encode()).decode()


async def token(
    http: httpx.AsyncClient, client_id: str, secret: str, address: str, *, base: str = ""
) -> httpx.Response:
    headers = {"Authorization": _basic(client_id, secret), "X-Forwarded-For": address}
    return await http.post(base + TOKEN, data=GRANT, headers=headers)


def failed(response: httpx.Response) -> None:
    assert response.status_code == 401, response.text
    assert response.json()["error"] == "invalid_client"


def refused(response: httpx.Response) -> int:
    """The Retry-After of a 429 in RFC 6749 §5.2's format."""
    assert response.status_code == 429, response.text
    assert response.headers["content-type"] == "application/json"
    assert response.headers["cache-control"] == "no-store"
    body = response.json()
    assert set(body) == {"error", "error_description"}
    assert body["error"] == "temporarily_unavailable"
    return int(response.headers["Retry-After"])


async def test_a_client_id_is_refused_past_the_limit_from_every_address_right_secret_too(
    api_with: ApiWith, client: Registered, other_client: Registered, clock: FixedClock
) -> None:
    async with api_with(PIN_OAUTH__FAILURE_LIMIT=LIMIT) as http:
        for n in range(3):
            failed(await token(http, client.client_id, "wrong", f"198.51.100.{n}"))
            clock.advance(timedelta(seconds=10))
        # The first failure, 30 s old, leaves the minute in 30 s.
        assert refused(await token(http, client.client_id, "wrong", "198.51.100.9")) == 30
        assert refused(await token(http, client.client_id, client.secret, "198.51.100.10")) == 30
        other = await token(http, other_client.client_id, other_client.secret, "198.51.100.11")
        assert other.status_code == 200, other.text
        clock.advance(timedelta(seconds=29))
        assert refused(await token(http, client.client_id, client.secret, "198.51.100.10")) == 1
        clock.advance(timedelta(seconds=1))
        granted = await token(http, client.client_id, client.secret, "198.51.100.10")
        assert granted.status_code == 200, granted.text


async def test_an_address_is_refused_past_the_limit_whatever_the_client_ids(
    api_with: ApiWith, client: Registered, other_client: Registered
) -> None:
    async with api_with(PIN_OAUTH__FAILURE_LIMIT=LIMIT) as http:
        address = "203.0.113.9"
        failed(await token(http, str(new_id()), "guess", address))  # an unknown client
        failed(await token(http, "not-a-uuid", "guess", address))
        failed(await token(http, other_client.client_id, "guess", address))
        assert refused(await token(http, client.client_id, client.secret, address)) == 60
        granted = await token(http, client.client_id, client.secret, "203.0.113.10")
        assert granted.status_code == 200, granted.text


async def test_an_ipv6_client_is_counted_by_its_64(api_with: ApiWith, client: Registered) -> None:
    async with api_with(PIN_OAUTH__FAILURE_LIMIT=LIMIT) as http:
        for suffix in ("1", "2", "abcd:1"):
            failed(await token(http, str(new_id()), "guess", f"2001:db8:1:2::{suffix}"))
        refused(await token(http, client.client_id, client.secret, "2001:db8:1:2:ffff::1"))
        granted = await token(http, client.client_id, client.secret, "2001:db8:1:3::1")
        assert granted.status_code == 200, granted.text


async def test_malformed_credentials_and_introspection_count_against_the_same_limit(
    api_with: ApiWith, client: Registered
) -> None:
    async with api_with(PIN_OAUTH__FAILURE_LIMIT=LIMIT) as http:
        address = {"X-Forwarded-For": "192.0.2.7"}
        garbage = {"Authorization": "Basic !!!not-base64!!!", **address}
        failed(await http.post(TOKEN, data=GRANT, headers=garbage))
        failed(await http.post(INTROSPECT, data={"token": "x"}, headers=garbage))
        wrong = {"Authorization": _basic(client.client_id, "wrong"), **address}
        failed(await http.post(INTROSPECT, data={"token": "x"}, headers=wrong))
        right = {"Authorization": _basic(client.client_id, client.secret), **address}
        refused(await http.post(INTROSPECT, data={"token": "x"}, headers=right))
        refused(await http.post(TOKEN, data=GRANT, headers=right))


async def test_failures_past_the_minute_are_deleted_by_later_failures(
    api_with: ApiWith, client: Registered, runtime: Runtime, clock: FixedClock
) -> None:
    async with api_with(PIN_OAUTH__FAILURE_LIMIT=LIMIT) as http:
        for n in range(3):
            failed(await token(http, client.client_id, "wrong", f"198.51.100.{n}"))
        clock.advance(timedelta(minutes=1))
        failed(await token(http, "not-a-uuid", "wrong", "192.0.2.1"))
    async with runtime.database.connection() as conn:
        kept = await conn.fetch(
            "select key, failed_at from identity.client_authentication_failures"
        )
    assert [(row["key"], row["failed_at"]) for row in kept] == [
        ("address:192.0.2.1", [clock.now()])
    ]


def _failure_lines(logs: LogCapture, client_id: str) -> list[dict[str, object]]:
    lines = [json.loads(line) for line in logs.lines() if "client authentication failed" in line]
    return [line for line in lines if line.get("clientId") == client_id]


async def test_failures_are_logged_once_a_minute_per_client_id_with_the_rest_counted(
    api_with: ApiWith,
    client: Registered,
    other_client: Registered,
    clock: FixedClock,
    captured_logs: LogCapture,
) -> None:
    async with api_with(PIN_OAUTH__FAILURE_LIMIT="100") as http:
        for n in range(20):
            failed(await token(http, client.client_id, "wrong", f"198.51.100.{n}"))
        for n in range(5):
            failed(await token(http, other_client.client_id, "wrong", f"198.51.100.{n}"))
        clock.advance(timedelta(seconds=59))
        failed(await token(http, client.client_id, "wrong", "198.51.100.1"))
        assert len(_failure_lines(captured_logs, client.client_id)) == 1
        assert len(_failure_lines(captured_logs, other_client.client_id)) == 1
        clock.advance(timedelta(seconds=1))
        failed(await token(http, client.client_id, "wrong", "198.51.100.1"))
        first, second = _failure_lines(captured_logs, client.client_id)
        assert (first["reason"], first["suppressed"]) == ("wrong secret", 0)
        assert (second["reason"], second["suppressed"]) == ("wrong secret", 20)
        metrics = (await http.get("/metrics")).text
    counted = re.search(
        r'identity_oauth_client_authentication_failures_total\{reason="wrong_secret"\} (\S+)',
        metrics,
    )
    assert counted is not None and float(counted.group(1)) == 27
    assert client.secret not in "\n".join(captured_logs.lines())


def test_the_log_remembers_a_bounded_number_of_client_ids(captured_logs: LogCapture) -> None:
    """Made-up ids are each logged once; the memory of them stays bounded."""
    failure_log = FailureLog(max_ids=3)
    for n in range(1, 11):
        failure_log.failed(uuid.UUID(int=n), FailureReason.UNKNOWN_CLIENT, T0)
        assert len(failure_log) <= 3
    failure_log.failed(uuid.UUID(int=10), FailureReason.UNKNOWN_CLIENT, T0)
    assert len(_failure_lines(captured_logs, str(uuid.UUID(int=10)))) == 1


# Several API processes on one database, failures sent to all of them at once.

PROCESSES = 3
PROCESS_LIMIT = 5
BURST = 24


@pytest.fixture
def api_processes(settings_env: dict[str, str], tmp_path: Path) -> Iterator[list[str]]:
    env = {
        **settings_env,
        "PIN_OAUTH__FAILURE_LIMIT": str(PROCESS_LIMIT),
        "PIN_LOG_FORMAT": "json",
    }
    processes: list[subprocess.Popen[str]] = []
    urls = []
    with (tmp_path / "api.log").open("w") as output:
        try:
            for _ in range(PROCESSES):
                port = free_port()
                processes.append(pin_sessions("serve", "--port", str(port), env=env, output=output))
                urls.append(f"http://127.0.0.1:{port}")
            for url, process in zip(urls, processes, strict=True):
                wait_until_ready(url, process)
            yield urls
        finally:
            for process in processes:
                process.terminate()
            for process in processes:
                process.wait(timeout=30)


async def burst(urls: list[str], attempts: list[tuple[str, str, str]]) -> Counter[int]:
    """Every (client id, secret, address) attempt at once, spread over the processes."""
    async with httpx.AsyncClient(timeout=30) as http:
        responses = await asyncio.gather(
            *(
                token(http, client_id, secret, address, base=url)
                for url, (client_id, secret, address) in zip(
                    itertools.cycle(urls), attempts, strict=False
                )
            )
        )
    for response in responses:
        if response.status_code == 429:
            assert 1 <= refused(response) <= 60
    return Counter(response.status_code for response in responses)


async def test_the_limits_hold_across_api_processes_on_one_database(
    api_processes: list[str],
    client: Registered,
    other_client: Registered,
    runtime: Runtime,
    tmp_path: Path,
) -> None:
    one_id = [(client.client_id, f"guess-{n}", f"198.51.100.{n}") for n in range(BURST)]
    assert await burst(api_processes, one_id) == {401: PROCESS_LIMIT, 429: BURST - PROCESS_LIMIT}
    # Its own secret, from an address that never failed: the id is locked out.
    assert await burst(api_processes, [(client.client_id, client.secret, "192.0.2.1")]) == {429: 1}

    one_address = [(str(new_id()), "guess", "203.0.113.7") for _ in range(BURST)]
    assert await burst(api_processes, one_address) == {
        401: PROCESS_LIMIT,
        429: BURST - PROCESS_LIMIT,
    }
    right = (other_client.client_id, other_client.secret)
    assert await burst(api_processes, [(*right, "203.0.113.7")]) == {429: 1}
    assert await burst(api_processes, [(*right, "203.0.113.8")]) == {200: 1}

    async with runtime.database.connection() as conn:
        kept = await conn.fetchval(
            "select failed_at from identity.client_authentication_failures where key = $1",
            f"client:{client.client_id}",
        )
    assert len(kept) == PROCESS_LIMIT  # the newest failures of the minute, no more
    # One line a minute per client id in each process, however many failures it saw.
    lines = (tmp_path / "api.log").read_text().splitlines()
    logged = [line for line in lines if '"client authentication failed"' in line]
    assert 1 <= sum(client.client_id in line for line in logged) <= PROCESSES


# A busy minute of failures from many networks and ids.
INSERT_FAILURES = """
insert into identity.client_authentication_failures
    (key, failed_at, last_failed_at, last_refused)
select case when n % 2 = 0 then 'client:' || gen_random_uuid() else 'address:198.51.' || n end,
       array[$1::timestamptz], $1, false
from generate_series(1, 80000) as n
"""


async def test_every_authentication_reads_the_failures_through_the_primary_key(
    runtime: Runtime, clock: FixedClock, database_url: str
) -> None:
    """Each authentication reads two rows: a scan of the table would make a success slow
    exactly when someone is guessing."""
    setup = await asyncpg.connect(database_url)
    try:
        await setup.execute(INSERT_FAILURES, clock.now())
        await setup.execute("analyze identity.client_authentication_failures")
    finally:
        await setup.close()
    async with runtime.database.connection() as conn:
        query = QUERIES.select_client_credentials
        arguments = query.args(
            client_id=new_id(), client_key=f"client:{new_id()}", address_key="address:198.51.7.7"
        )
        rows = await conn.fetch(f"explain {query.text}", *arguments)
    plan = "\n".join(row[0] for row in rows)
    assert "Seq Scan on client_authentication_failures" not in plan, plan
    assert plan.count("client_authentication_failures_pkey") == 2, plan

"""SPEC §8 abuse limits on sign-in requests: per client address and service-wide, besides the
5 per phone, each a 429 with ``Retry-After``; counted in PostgreSQL, so several API processes
on one database hold them together."""

from __future__ import annotations

import asyncio
import itertools
import subprocess
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import asyncpg
import httpx
import pytest

from pin_sessions.identity.domain import SignInLimits
from pin_sessions.identity.repository.loaded import QUERIES
from pin_sessions.platform.clock import FixedClock
from pin_sessions.platform.runtime import Runtime
from tests.conftest import TEST_SECRET_KEY
from tests.identity.conftest import ApiWith
from tests.identity.flows import new_phone, problem_code
from tests.support.processes import free_port, pin_sessions, wait_until_ready

REQUESTS = "/api/identity/sign-in/requests"


@pytest.fixture
def settings_env(settings_env: dict[str, str]) -> dict[str, str]:
    # The in-process client connects from 127.0.0.1, which forwards the client's address.
    return {**settings_env, "PIN_TRUSTED_PROXIES": "127.0.0.1"}


async def ask(http: httpx.AsyncClient, client_ip: str, phone: str | None = None) -> httpx.Response:
    return await http.post(
        REQUESTS,
        json={"phoneNumber": phone or new_phone()},
        headers={"X-Forwarded-For": client_ip},
    )


def refused(response: httpx.Response) -> int:
    """The Retry-After of a 429 IDENTITY_TOO_MANY_REQUESTS."""
    assert response.status_code == 429, response.text
    assert problem_code(response) == "IDENTITY_TOO_MANY_REQUESTS"
    return int(response.headers["Retry-After"])


async def test_an_address_gets_per_ip_limit_codes_an_hour_whatever_the_phones(
    api_with: ApiWith, clock: FixedClock
) -> None:
    async with api_with(PIN_SIGN_IN__PER_IP_LIMIT="3") as http:
        for _ in range(3):
            assert (await ask(http, "198.51.100.7")).status_code == 201
            clock.advance(timedelta(minutes=10))
        response = await ask(http, "198.51.100.7")
        # The first request, 30 minutes old, leaves the hour in 30 minutes.
        assert refused(response) == 30 * 60
        assert "address" in response.json()["detail"]
        assert (await ask(http, "198.51.100.8")).status_code == 201  # another address
        clock.advance(timedelta(minutes=30))
        assert (await ask(http, "198.51.100.7")).status_code == 201


async def test_an_ipv6_client_is_counted_by_its_64(api_with: ApiWith) -> None:
    async with api_with(PIN_SIGN_IN__PER_IP_LIMIT="3") as http:
        for suffix in ("1", "2", "abcd:1"):
            assert (await ask(http, f"2001:db8:1:2::{suffix}")).status_code == 201
        refused(await ask(http, "2001:db8:1:2:ffff:ffff:ffff:ffff"))
        assert (await ask(http, "2001:db8:1:3::1")).status_code == 201


async def test_the_service_sends_at_most_global_limit_codes_a_minute(
    api_with: ApiWith, clock: FixedClock
) -> None:
    async with api_with(PIN_SIGN_IN__GLOBAL_LIMIT="4") as http:
        for n in range(4):
            assert (await ask(http, f"198.51.100.{n}")).status_code == 201
        response = await ask(http, "203.0.113.1")
        assert refused(response) == 60
        assert "service" in response.json()["detail"]
        clock.advance(timedelta(seconds=45))
        assert refused(await ask(http, "203.0.113.1")) == 15
        clock.advance(timedelta(seconds=15))
        assert (await ask(http, "203.0.113.1")).status_code == 201


# A month of requests (retention keeps 30 days): 2 a minute from 3000 phones and addresses.
INSERT_A_MONTH_OF_REQUESTS = """
insert into identity.sign_in_confirmation_requests
    (id, phone_number, code_hash, attempts, status, created_at, expires_at, ip_address,
     ip_network)
select gen_random_uuid(), phone, '\\x00', 0, 'Expired', at, at, ip, ip
from (select '+4479110' || lpad((n % 3000)::text, 5, '0') as phone,
             $1::timestamptz - n * interval '30 seconds' as at,
             '198.51.' || (n % 3000 / 250) || '.' || (n % 250) as ip
      from generate_series(1, 86400) as n) as requests
"""


async def test_each_limit_is_counted_through_an_index_not_the_whole_table(
    runtime: Runtime, clock: FixedClock, database_url: str
) -> None:
    """Every sign-in request runs this under the service's one lock: a scan of the table
    would make every other request wait for it."""
    now = clock.now()
    limits = SignInLimits.of(per_ip_limit=20, global_limit=600)
    # The setup on a connection of its own: the API's is bounded for requests, not for this.
    setup = await asyncpg.connect(database_url)
    try:
        await setup.execute(INSERT_A_MONTH_OF_REQUESTS, now)
        await setup.execute("analyze identity.sign_in_confirmation_requests")
    finally:
        await setup.close()
    async with runtime.database.connection() as conn:
        query = QUERIES.sign_in_request_limit_edges
        arguments = query.args(
            phone_number="+447911000042",
            phone_since=now - limits.per_phone.window,
            phone_offset=limits.per_phone.count - 1,
            ip_network="198.51.0.42",
            address_since=now - limits.per_address.window,
            address_offset=limits.per_address.count - 1,
            service_since=now - limits.service.window,
            service_offset=limits.service.count - 1,
        )
        rows = await conn.fetch(f"explain {query.text}", *arguments)
    plan = "\n".join(row[0] for row in rows)
    assert "Seq Scan" not in plan, plan
    for index in (
        "ix_sicr_phone_number_created_at",
        "ix_sicr_ip_network_created_at",
        "ix_sicr_created_at",
    ):
        assert index in plan, plan


# Several API processes on one database, requests to all of them at once.

PROCESSES = 3
PER_IP_LIMIT = 4
GLOBAL_LIMIT = 10


@pytest.fixture
def api_processes(settings_env: dict[str, str], tmp_path: Path) -> Iterator[list[str]]:
    env = {
        **settings_env,
        "PIN_SECRET_KEY": TEST_SECRET_KEY,
        "PIN_SIGN_IN__PER_IP_LIMIT": str(PER_IP_LIMIT),
        "PIN_SIGN_IN__GLOBAL_LIMIT": str(GLOBAL_LIMIT),
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


async def burst(urls: list[str], requests: list[tuple[str, str]]) -> Counter[int]:
    """Every (client address, phone) request at once, spread over the processes."""
    async with httpx.AsyncClient(timeout=30) as client:
        responses = await asyncio.gather(
            *(
                client.post(
                    url + REQUESTS,
                    json={"phoneNumber": phone},
                    headers={"X-Forwarded-For": client_ip},
                )
                for url, (client_ip, phone) in zip(itertools.cycle(urls), requests)
            )
        )
    for response in responses:
        if response.status_code == 429:
            assert int(response.headers["Retry-After"]) >= 1
    return Counter(response.status_code for response in responses)


async def test_every_limit_holds_across_api_processes_on_one_database(
    api_processes: list[str], runtime: Runtime
) -> None:
    one_address = [("198.51.100.1", new_phone()) for _ in range(12)]
    assert await burst(api_processes, one_address) == {201: PER_IP_LIMIT, 429: 12 - PER_IP_LIMIT}

    phone = new_phone()
    one_phone = [(f"198.51.100.{100 + n}", phone) for n in range(12)]
    assert await burst(api_processes, one_phone) == {201: 5, 429: 7}

    # 4 + 5 of the service's 10 per minute are used: one more fits, whoever asks.
    anyone = [(f"203.0.113.{n}", new_phone()) for n in range(12)]
    assert await burst(api_processes, anyone) == {201: 1, 429: 11}
    async with runtime.database.connection() as conn:
        stored = await conn.fetchval("select count(*) from identity.sign_in_confirmation_requests")
    assert stored == GLOBAL_LIMIT

"""Pool sizes and connection timeouts are settings, and the pools obey them (SPEC §9).

The API's pool has its own bounds (``tests/platform/test_bounded_database.py``); here: a
worker process's pool size and the connect timeout every pool shares.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from datetime import timedelta

import pytest

from pin_sessions.bootstrap.database import api_database, worker_database
from pin_sessions.settings import LogFormat, SettingsError, load_settings


def test_pool_sizes_timeouts_and_the_stop_sequence_are_settings() -> None:
    defaults = load_settings({})
    assert defaults.database.worker_pool_max == 4
    assert defaults.database.connect_timeout == timedelta(seconds=10)
    assert defaults.http.shutdown_delay == timedelta(0)
    assert defaults.http.shutdown_timeout == timedelta(seconds=3)
    assert defaults.log_format is LogFormat.AUTO
    chosen = load_settings(
        {
            "PIN_DATABASE__WORKER_POOL_MAX": "7",
            "PIN_DATABASE__CONNECT_TIMEOUT": "PT3S",
            "PIN_HTTP__SHUTDOWN_DELAY": "5",
            "PIN_HTTP__SHUTDOWN_TIMEOUT": "PT20S",
            "PIN_LOG_FORMAT": "json",
        }
    )
    assert chosen.database.worker_pool_max == 7
    assert chosen.database.connect_timeout == timedelta(seconds=3)
    assert chosen.http.shutdown_delay == timedelta(seconds=5)
    assert chosen.http.shutdown_timeout == timedelta(seconds=20)
    assert chosen.log_format is LogFormat.JSON


@pytest.mark.parametrize(
    ("environ", "line"),
    [
        ({"PIN_DATABASE__WORKER_POOL_MAX": "0"}, "PIN_DATABASE__WORKER_POOL_MAX "),
        ({"PIN_DATABASE__CONNECT_TIMEOUT": "0"}, "PIN_DATABASE__CONNECT_TIMEOUT "),
        ({"PIN_HTTP__SHUTDOWN_DELAY": "-1"}, "PIN_HTTP__SHUTDOWN_DELAY must be >= 0 seconds"),
        ({"PIN_HTTP__SHUTDOWN_TIMEOUT": "0"}, "PIN_HTTP__SHUTDOWN_TIMEOUT "),
        ({"PIN_LOG_FORMAT": "pretty"}, "PIN_LOG_FORMAT "),
    ],
)
def test_a_bad_pool_timeout_or_log_setting_is_one_line_naming_it(
    environ: dict[str, str], line: str
) -> None:
    with pytest.raises(SettingsError) as caught:
        load_settings(environ)
    assert str(caught.value).startswith(line)
    assert "\n" not in str(caught.value)


async def test_a_worker_pool_holds_at_most_worker_pool_max_connections(database_url: str) -> None:
    settings = load_settings({"PIN_DATABASE__WORKER_POOL_MAX": "3"})
    database = worker_database(settings, database_url)
    await database.open()
    try:
        assert database.pool.get_max_size() == 3
    finally:
        await database.close()


async def test_the_api_pool_opens_full_before_its_first_request(database_url: str) -> None:
    settings = load_settings({"PIN_DATABASE__POOL_MAX": "5"})
    database = api_database(settings, database_url)
    await database.open()
    try:
        assert database.pool.get_size() == 5
        assert database.pool.get_idle_size() == 5
    finally:
        await database.close()


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A DSN whose server accepts the connection and never says a word."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        yield f"postgresql://pin@127.0.0.1:{port}/pin"


@pytest.mark.parametrize("role", ["api", "worker"])
async def test_opening_a_pool_gives_up_after_the_connect_timeout(
    silent_server: str, role: str
) -> None:
    settings = load_settings({"PIN_DATABASE__CONNECT_TIMEOUT": "0.2"})
    build = api_database if role == "api" else worker_database
    database = build(settings, silent_server)
    # Without the setting asyncpg waits 60 s; the guard only has to be shorter than that.
    async with asyncio.timeout(30):
        with pytest.raises(TimeoutError):
            await database.open()

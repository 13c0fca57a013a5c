"""Fixtures every test can use: a clean migrated database per test, settings, a live API."""

from __future__ import annotations

import asyncio
import gc
import io
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry

from pin_sessions.bootstrap.api import build_api
from pin_sessions.bootstrap.database import build_runtime
from pin_sessions.platform.clock import FixedClock
from pin_sessions.platform.logging import configure_logging
from pin_sessions.platform.metrics import new_registry
from pin_sessions.platform.runtime import Runtime
from pin_sessions.settings import Settings, load_settings
from tests.support.http import LiveServer, in_process
from tests.support.markers import mark_e2e
from tests.support.postgres import THROWAWAY_SERVER_SETTINGS, DatabaseFactory, test_server

TEST_SECRET_KEY = "test-secret-key-long-enough-for-every-derived-key"
T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


class LogCapture(io.StringIO):
    """Every JSON log line the suite writes, for tests that read them."""

    def lines(self) -> list[str]:
        return self.getvalue().splitlines()


_LOGS = LogCapture()

# A test process allocates heavily (Hypothesis, schemathesis, Playwright, asyncpg records):
# at the default threshold of 700 allocations the collector ran thousands of times per
# process, and each full collection walked every module object of the project and of the
# test libraries. Measured on a third of the suite: 6.3 s of the test processes' CPU spent
# collecting garbage, 2.9 s with these two lines (BENCHMARKS.md, "The test suite").
gc.set_threshold(50_000, 10, 10)


def pytest_collection_finish() -> None:
    """What collection imported lives as long as the process: out of the collector's way."""
    gc.freeze()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """``e2e`` on every test that starts a process, serves HTTP or drives a browser or broker
    (tests/support/markers.py): ``make check`` runs the others.

    The ``long`` tests go first: collected where their files sort, they started two thirds
    into the run and ended it alone, the machine idle for most of their last minute. First,
    they run (one after another, in the first process's share) while the other processes
    keep both cores busy, and those take the rest of that share's queue when theirs run out.
    """
    mark_e2e(items)
    items.sort(key=lambda item: item.get_closest_marker("long") is None)


@pytest.fixture(scope="session", autouse=True)
def _json_logs() -> None:
    configure_logging("info", stream=_LOGS)


@pytest.fixture(autouse=True)
async def _tasks_end_with_their_test() -> AsyncIterator[None]:
    """Tests share their process's event loop (one browser per process needs it): what a test
    leaves running is cancelled as it ends, as closing a loop of its own did."""
    before = asyncio.all_tasks()
    yield
    left = asyncio.all_tasks() - before - {asyncio.current_task()}
    for task in left:
        task.cancel()
    if left:
        # As asyncio.Runner.close does: their outcomes are collected here, so none is reported
        # later by the garbage collector, at whatever moment it runs.
        await asyncio.wait_for(asyncio.gather(*left, return_exceptions=True), timeout=10)


@pytest.fixture
def captured_logs() -> LogCapture:
    return _LOGS


@pytest.fixture(scope="session")
def databases(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DatabaseFactory]:
    workdir = tmp_path_factory.mktemp("postgres")
    with test_server(workdir, settings=THROWAWAY_SERVER_SETTINGS) as admin_dsn:
        factory = DatabaseFactory(admin_dsn)
        factory.prepare_template()
        try:
            yield factory
        finally:
            factory.close()


@pytest.fixture
def database_url(databases: DatabaseFactory) -> Iterator[str]:
    """A fresh, migrated database for this test alone."""
    dsn = databases.create()
    try:
        yield dsn
    finally:
        databases.drop(dsn)


@pytest.fixture
def settings_env(tmp_path: Path, database_url: str) -> dict[str, str]:
    """The environment a test process would see; tests may add to it before use."""
    return {
        "PIN_DATABASE_URL": database_url,
        "PIN_DATA_DIR": str(tmp_path / "data"),
        "PIN_SECRET_KEY": TEST_SECRET_KEY,
    }


@pytest.fixture
def settings(settings_env: dict[str, str]) -> Settings:
    return load_settings(settings_env)


@pytest.fixture
def clock() -> FixedClock:
    return FixedClock(T0)


@pytest.fixture
def registry() -> CollectorRegistry:
    """One metrics registry shared by the test's runtime and its live API."""
    return new_registry()


@pytest.fixture
async def runtime(
    settings: Settings, database_url: str, clock: FixedClock, registry: CollectorRegistry
) -> AsyncIterator[Runtime]:
    """An opened runtime on this test's database, with a clock the test moves."""
    runtime = build_runtime(settings, database_url, clock=clock, registry=registry)
    await runtime.database.open()
    try:
        yield runtime
    finally:
        await runtime.database.close()


@pytest.fixture
def api_url(
    settings: Settings, database_url: str, clock: FixedClock, registry: CollectorRegistry
) -> Iterator[str]:
    """The whole API served by uvicorn on a free loopback port."""
    api = build_api(build_runtime(settings, database_url, clock=clock, registry=registry))
    with LiveServer(api) as url:
        yield url


@pytest.fixture
async def http(
    settings: Settings, database_url: str, clock: FixedClock, registry: CollectorRegistry
) -> AsyncIterator[httpx.AsyncClient]:
    """The whole API called in process (no socket), its lifespan run: most API tests use it;
    ``api_url`` serves it over real HTTP for the tests about the wire itself."""
    api = build_api(build_runtime(settings, database_url, clock=clock, registry=registry))
    async with in_process(api) as client:
        yield client

"""One PostgreSQL per test process; a migrated template database cloned for every test.

Speed, not durability: the tests' throwaway server runs with ``fsync``, ``full_page_writes``
and ``synchronous_commit`` off (a crash of it loses nothing anyone keeps), set here by ``ALTER
SYSTEM`` on the server this module started, never by ``pin-sessions up``'s code, whose embedded
server keeps PostgreSQL's durable defaults.

A clone copies the template's files (``STRATEGY FILE_COPY``) rather than writing each of its
blocks to the WAL, PostgreSQL's default since 15: 6 ms of the server's CPU against 69 ms here,
for the two checkpoints it asks, which cost nothing on a server without ``fsync``.

Each clone is made as its test starts and dropped as it ends, never in the background:
``CREATE`` and ``DROP DATABASE`` hold a transaction id, and the built-in bus reads only below
the server-wide snapshot xmin, so a clone made during a test would hide its new outbox rows.
"""

from __future__ import annotations

import asyncio
import os
import threading
import uuid
from collections.abc import Coroutine, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from pin_sessions.platform.embedded import EmbeddedPostgres
from pin_sessions.platform.migrations import migrate
from tests.support.waiting import wait_until

TEST_DATABASE_URL_VARIABLE = "PIN_TEST_DATABASE_URL"
# Safe only for a server whose data nobody keeps: the embedded one of a test run.
THROWAWAY_SERVER_SETTINGS = {"fsync": "off", "full_page_writes": "off", "synchronous_commit": "off"}
STATEMENT_WAIT_SECONDS = 120.0
T = TypeVar("T")


def with_database(dsn: str, database: str) -> str:
    """The same server and credentials, another database name."""
    parts = urlsplit(dsn)
    return urlunsplit(parts._replace(path=f"/{database}"))


@contextmanager
def test_server(workdir: Path, *, settings: Mapping[str, str]) -> Iterator[str]:
    """An admin DSN: ``PIN_TEST_DATABASE_URL`` when set (its settings untouched), else a
    throwaway embedded server with ``settings`` applied: the tests pass
    :data:`THROWAWAY_SERVER_SETTINGS`, the benches none (they measure what production pays)."""
    external = os.environ.get(TEST_DATABASE_URL_VARIABLE)
    if external:
        yield external
        return
    embedded = EmbeddedPostgres(workdir / "pg", delete_on_stop=True)
    embedded.start()
    try:
        if settings:
            asyncio.run(_configure(embedded.admin_dsn(), settings))
        yield embedded.admin_dsn()
    finally:
        embedded.stop()


async def _configure(admin_dsn: str, settings: Mapping[str, str]) -> None:
    """Server settings that a reload applies (no restart); back once a new session shows them."""
    conn = await asyncpg.connect(admin_dsn)
    try:
        for name, value in settings.items():
            # Names and values are this module's constants; ALTER SYSTEM takes no parameters.
            await conn.execute(f"alter system set {name} = '{value}'")
        await conn.execute("select pg_reload_conf()")
    finally:
        await conn.close()

    async def applied() -> bool:
        probe = await asyncpg.connect(admin_dsn)
        try:
            shown = [await probe.fetchval(f"show {name}") for name in settings]
        finally:
            await probe.close()
        return shown == list(settings.values())

    await wait_until(applied, timeout=30, interval=0.05)


class DatabaseFactory:
    """Creates migrated (or empty) databases on the test server and drops them after the test.

    Through one admin connection, kept open on a loop of the factory's own thread, so a test
    pays for neither a new connection nor a new event loop, and any thread may call it.
    """

    def __init__(self, admin_dsn: str) -> None:
        self.admin_dsn = admin_dsn
        self.template = f"pin_template_{uuid.uuid4().hex[:12]}"
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="test-databases", daemon=True
        )
        self._thread.start()
        self._conn: asyncpg.Connection | None = None
        self._strategy = ""

    def prepare_template(self) -> None:
        if int(self._run(self._fetchval("show server_version_num"))) >= 150000:
            self._strategy = " strategy file_copy"  # an older server copies files anyway
        self._execute(f'create database "{self.template}"')

        async def apply() -> None:
            conn = await asyncpg.connect(with_database(self.admin_dsn, self.template))
            try:
                await migrate(conn)
            finally:
                await conn.close()

        self._run(apply())

    def create(self, *, migrated: bool = True) -> str:
        name = f"pin_test_{uuid.uuid4().hex[:16]}"
        source = f' template "{self.template}"' if migrated else ""
        self._execute(f'create database "{name}"{source}{self._strategy}')
        return with_database(self.admin_dsn, name)

    def drop(self, dsn: str) -> None:
        name = urlsplit(dsn).path.lstrip("/")
        self._execute(f'drop database if exists "{name}" with (force)')

    def close(self) -> None:
        """Drop the template and close the admin connection."""
        try:
            self._execute(f'drop database if exists "{self.template}" with (force)')
            if self._conn is not None:
                self._run(self._conn.close())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=STATEMENT_WAIT_SECONDS)
            self._loop.close()

    def _execute(self, statement: str) -> None:
        async def execute() -> None:
            await (await self._admin()).execute(statement)

        self._run(execute())

    async def _fetchval(self, query: str) -> Any:
        return await (await self._admin()).fetchval(query)

    async def _admin(self) -> asyncpg.Connection:
        if self._conn is None or self._conn.is_closed():
            self._conn = await asyncpg.connect(self.admin_dsn)
        return self._conn

    def _run(self, work: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(work, self._loop).result(STATEMENT_WAIT_SECONDS)

"""One PostgreSQL per test run; a migrated template database cloned for every test."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from pin_sessions.platform.embedded import EmbeddedPostgres
from pin_sessions.platform.migrations import migrate

TEST_DATABASE_URL_VARIABLE = "PIN_TEST_DATABASE_URL"


def with_database(dsn: str, database: str) -> str:
    """The same server and credentials, another database name."""
    parts = urlsplit(dsn)
    return urlunsplit(parts._replace(path=f"/{database}"))


@contextmanager
def test_server(workdir: Path) -> Iterator[str]:
    """An admin DSN: ``PIN_TEST_DATABASE_URL`` when set, else a throwaway embedded server."""
    external = os.environ.get(TEST_DATABASE_URL_VARIABLE)
    if external:
        yield external
        return
    embedded = EmbeddedPostgres(workdir / "pg", delete_on_stop=True)
    embedded.start()
    try:
        yield embedded.admin_dsn()
    finally:
        embedded.stop()


async def _admin(admin_dsn: str, *statements: str) -> None:
    conn = await asyncpg.connect(admin_dsn)
    try:
        for statement in statements:
            await conn.execute(statement)
    finally:
        await conn.close()


class DatabaseFactory:
    """Creates empty or migrated databases on the test server and drops them afterwards."""

    def __init__(self, admin_dsn: str) -> None:
        self.admin_dsn = admin_dsn
        self.template = f"pin_template_{uuid.uuid4().hex[:12]}"

    def prepare_template(self) -> None:
        asyncio.run(_admin(self.admin_dsn, f'create database "{self.template}"'))

        async def apply() -> None:
            conn = await asyncpg.connect(with_database(self.admin_dsn, self.template))
            try:
                await migrate(conn)
            finally:
                await conn.close()

        asyncio.run(apply())

    def create(self, *, migrated: bool = True) -> str:
        name = f"pin_test_{uuid.uuid4().hex[:16]}"
        source = f' template "{self.template}"' if migrated else ""
        asyncio.run(_admin(self.admin_dsn, f'create database "{name}"{source}'))
        return with_database(self.admin_dsn, name)

    def drop(self, dsn: str) -> None:
        name = urlsplit(dsn).path.lstrip("/")
        asyncio.run(_admin(self.admin_dsn, f'drop database if exists "{name}" with (force)'))

    def drop_template(self) -> None:
        asyncio.run(
            _admin(self.admin_dsn, f'drop database if exists "{self.template}" with (force)')
        )

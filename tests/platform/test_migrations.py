from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator

import asyncpg
import pytest

from pin_sessions.platform.migrations import available_migrations, migrate
from tests.support.postgres import DatabaseFactory


@pytest.fixture
def empty_database(databases: DatabaseFactory) -> Iterator[str]:
    dsn = databases.create(migrated=False)
    try:
        yield dsn
    finally:
        databases.drop(dsn)


async def test_migrating_an_empty_database_creates_the_schemas_and_the_outbox(
    empty_database: str,
) -> None:
    conn = await asyncpg.connect(empty_database)
    try:
        applied = await migrate(conn)
        assert applied == [migration.version for migration in available_migrations()]
        schemas = {row["nspname"] for row in await conn.fetch("select nspname from pg_namespace")}
        assert {"identity", "user_activity", "dev_stats", "messaging"} <= schemas
        columns = {
            row["column_name"]
            for row in await conn.fetch(
                "select column_name from information_schema.columns "
                "where table_schema = 'messaging' and table_name = 'outbox'"
            )
        }
        assert {
            "position",
            "message_id",
            "topic",
            "event_type",
            "version",
            "aggregate_type",
            "aggregate_id",
            "payload",
            "headers",
            "created_at",
            "txid",
            "published_at",
        } <= columns
    finally:
        await conn.close()


async def test_migrating_again_is_a_no_op(database_url: str) -> None:
    conn = await asyncpg.connect(database_url)
    try:
        before = await conn.fetch("select version, applied_at from public.schema_migrations")
        assert await migrate(conn) == []
        after = await conn.fetch("select version, applied_at from public.schema_migrations")
        assert before == after
    finally:
        await conn.close()


async def test_parallel_migrations_apply_each_file_once(empty_database: str) -> None:
    connections = [await asyncpg.connect(empty_database) for _ in range(4)]
    try:
        results = await asyncio.gather(*(migrate(conn) for conn in connections))
        applied = sorted(version for result in results for version in result)
        assert applied == [migration.version for migration in available_migrations()]
        counts = await connections[0].fetch(
            "select version, count(*) from public.schema_migrations group by version"
        )
        assert all(row["count"] == 1 for row in counts)
    finally:
        for conn in connections:
            await conn.close()


def test_two_migrate_processes_at_once_both_succeed(empty_database: str, tmp_path: object) -> None:
    env = {**os.environ, "PIN_DATABASE_URL": empty_database, "PIN_DATA_DIR": str(tmp_path)}
    processes = [
        subprocess.Popen(
            [sys.executable, "-m", "pin_sessions", "migrate"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [process.communicate(timeout=60) for process in processes]
    assert [process.returncode for process in processes] == [0, 0], outputs

    async def ledger() -> list[int]:
        conn = await asyncpg.connect(empty_database)
        try:
            rows = await conn.fetch("select version from public.schema_migrations order by 1")
            return [row["version"] for row in rows]
        finally:
            await conn.close()

    assert asyncio.run(ledger()) == [migration.version for migration in available_migrations()]


def test_migration_files_are_numbered_without_gaps() -> None:
    versions = [migration.version for migration in available_migrations()]
    assert versions == list(range(1, len(versions) + 1))

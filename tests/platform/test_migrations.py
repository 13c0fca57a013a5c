from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

import asyncpg
import pytest

from pin_sessions.platform.migrations import (
    CREATE_LEDGER,
    INSERT_APPLIED,
    available_migrations,
    migrate,
)
from tests.support.postgres import DatabaseFactory

# The migration that makes service clients' names unique.
UNIQUE_CLIENT_NAMES = 21


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


async def _migrated_before(conn: asyncpg.Connection, version: int) -> None:
    """The schema as a deployment that last migrated before ``version`` has it."""
    await conn.execute(CREATE_LEDGER)
    for migration in available_migrations():
        if migration.version < version:
            async with conn.transaction():
                await conn.execute(migration.sql)
                await conn.execute(INSERT_APPLIED, migration.version, migration.name)


async def test_client_names_registered_twice_are_told_apart_before_they_become_unique(
    empty_database: str,
) -> None:
    """Migration 0021 makes names unique without failing on (or dropping) existing twins."""
    conn = await asyncpg.connect(empty_database)
    try:
        await _migrated_before(conn, UNIQUE_CLIENT_NAMES)
        twins = [
            # (id, status, created): the Active one keeps the name, whatever its age.
            (uuid.UUID(int=1), "Disabled", "2026-01-01"),
            (uuid.UUID(int=2), "Active", "2026-02-01"),
            (uuid.UUID(int=3), "Active", "2026-03-01"),
        ]
        for client_id, status, created in twins:
            await conn.execute(
                "insert into identity.clients (client_id, name, secret_hash, scopes, status,"
                " created_at, updated_at) values ($1, $2, '\\x00', '{admin}', $3, $4, $4)",
                client_id,
                "c" * 100,
                status,
                datetime.fromisoformat(created).replace(tzinfo=UTC),
            )
        assert UNIQUE_CLIENT_NAMES in await migrate(conn)
        names = {
            row["client_id"]: row["name"]
            for row in await conn.fetch("select client_id, name from identity.clients")
        }
        assert names == {
            uuid.UUID(int=2): "c" * 100,
            uuid.UUID(int=1): "c" * 61 + f" ({uuid.UUID(int=1)})",
            uuid.UUID(int=3): "c" * 61 + f" ({uuid.UUID(int=3)})",
        }
        with pytest.raises(asyncpg.UniqueViolationError, match="ux_clients_name"):
            await conn.execute(
                "update identity.clients set name = $1 where client_id = $2",
                "c" * 100,
                uuid.UUID(int=3),
            )
    finally:
        await conn.close()

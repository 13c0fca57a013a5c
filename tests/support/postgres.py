"""One PostgreSQL per test process; a migrated template database cloned for every test.

Speed, not durability: the tests' throwaway server runs with ``fsync``, ``full_page_writes``
and ``synchronous_commit`` off (a crash of it loses nothing anyone keeps), set here by ``ALTER
SYSTEM`` on the server this module started, never by ``pin-sessions up``'s code, whose embedded
server keeps PostgreSQL's durable defaults. Cloning and dropping stay off the tests' path: a
thread keeps a few clones of the template ready and drops used ones behind the tests, so a test
waits for neither (``CREATE DATABASE … TEMPLATE`` copies every page, ``DROP … FORCE`` ends the
test's connections first). Each test still gets a database no test touched before.
"""

from __future__ import annotations

import asyncio
import os
import threading
import uuid
from collections import deque
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from pin_sessions.platform.embedded import EmbeddedPostgres
from pin_sessions.platform.migrations import migrate
from tests.support.waiting import wait_until

TEST_DATABASE_URL_VARIABLE = "PIN_TEST_DATABASE_URL"
# Safe only for a server whose data nobody keeps: the embedded one of a test run.
THROWAWAY_SERVER_SETTINGS = {"fsync": "off", "full_page_writes": "off", "synchronous_commit": "off"}
# Clones made ahead: one for the next test and one spare, so a test that takes its database
# while the previous one is still being cloned does not wait.
READY_CLONES = 2
CLONE_WAIT_SECONDS = 120.0


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


async def _admin(admin_dsn: str, *statements: str) -> None:
    conn = await asyncpg.connect(admin_dsn)
    try:
        for statement in statements:
            await conn.execute(statement)
    finally:
        await conn.close()


def _name(dsn: str) -> str:
    return urlsplit(dsn).path.lstrip("/")


class DatabaseFactory:
    """Migrated databases cloned from one template ahead of need, dropped behind use; empty
    (unmigrated) ones on demand. ``close()`` drops everything it made."""

    def __init__(self, admin_dsn: str) -> None:
        self.admin_dsn = admin_dsn
        self.template = f"pin_template_{uuid.uuid4().hex[:12]}"
        self._cond = threading.Condition()
        self._ready: deque[str] = deque()
        self._to_drop: deque[str] = deque()
        self._closing = False
        self._failure: BaseException | None = None
        self._worker: threading.Thread | None = None

    def prepare_template(self) -> None:
        asyncio.run(_admin(self.admin_dsn, f'create database "{self.template}"'))

        async def apply() -> None:
            conn = await asyncpg.connect(with_database(self.admin_dsn, self.template))
            try:
                await migrate(conn)
            finally:
                await conn.close()

        asyncio.run(apply())
        self._worker = threading.Thread(target=self._work, name="database-clones", daemon=True)
        self._worker.start()

    def create(self, *, migrated: bool = True) -> str:
        """A database no test used: a ready clone of the template, or an empty one."""
        if not migrated:
            name = f"pin_test_{uuid.uuid4().hex[:16]}"
            asyncio.run(_admin(self.admin_dsn, f'create database "{name}"'))
            return with_database(self.admin_dsn, name)
        with self._cond:
            if not self._cond.wait_for(
                lambda: self._ready or self._failure is not None, timeout=CLONE_WAIT_SECONDS
            ):
                raise AssertionError(f"no clone of the template within {CLONE_WAIT_SECONDS} s")
            if self._failure is not None:
                raise RuntimeError("cloning the template database failed") from self._failure
            name = self._ready.popleft()
            self._cond.notify_all()
        return with_database(self.admin_dsn, name)

    def drop(self, dsn: str) -> None:
        """Drop the database soon, after the test (its connections are ended then)."""
        with self._cond:
            self._to_drop.append(_name(dsn))
            self._cond.notify_all()

    def close(self) -> None:
        """Drop the spare clones, every database handed out, and the template."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        if self._worker is not None:
            self._worker.join(timeout=CLONE_WAIT_SECONDS)
        asyncio.run(
            _admin(self.admin_dsn, f'drop database if exists "{self.template}" with (force)')
        )

    def _next(self) -> tuple[str, str] | None:
        """The worker's next statement: a clone when one is missing, else a drop; None to end."""
        with self._cond:
            while True:
                if self._closing:
                    self._to_drop.extend(self._ready)
                    self._ready.clear()
                    return ("drop", self._to_drop.popleft()) if self._to_drop else None
                if len(self._ready) < READY_CLONES:
                    return "clone", f"pin_test_{uuid.uuid4().hex[:16]}"
                if self._to_drop:
                    return "drop", self._to_drop.popleft()
                self._cond.wait()

    def _work(self) -> None:
        loop = asyncio.new_event_loop()
        try:
            conn = loop.run_until_complete(asyncpg.connect(self.admin_dsn))
            try:
                while (job := self._next()) is not None:
                    action, name = job
                    if action == "clone":
                        loop.run_until_complete(
                            conn.execute(f'create database "{name}" template "{self.template}"')
                        )
                        with self._cond:
                            self._ready.append(name)
                            self._cond.notify_all()
                    else:
                        loop.run_until_complete(
                            conn.execute(f'drop database if exists "{name}" with (force)')
                        )
            finally:
                loop.run_until_complete(conn.close())
        except BaseException as exc:  # handed to the test waiting for a clone
            with self._cond:
                self._failure = exc
                self._cond.notify_all()
        finally:
            loop.close()

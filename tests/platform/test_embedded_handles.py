"""The wheel's handle list keeps only processes that still hold the embedded server.

A process killed with SIGKILL leaves its PID in the list; real processes play every case.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from pin_sessions.platform.embedded_handles import (
    HANDLE_STARTS_FILE,
    HANDLES_FILE,
    drop_stale_handles,
    record_handle_start,
)
from tests.support.waiting import wait_until_sync


@pytest.fixture
def live() -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen(["sleep", "60"])
    yield process
    process.kill()
    process.wait()


def _write_handles(pgdata: Path, pids: list[int]) -> None:
    (pgdata / HANDLES_FILE).write_text(json.dumps(pids))


def _handles(pgdata: Path) -> list[int]:
    pids: list[int] = json.loads((pgdata / HANDLES_FILE).read_text())
    return pids


def test_the_handle_of_a_process_that_no_longer_exists_is_dropped(
    tmp_path: Path, live: subprocess.Popen[bytes]
) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    _write_handles(tmp_path, [live.pid, dead.pid])

    assert drop_stale_handles(tmp_path) == [dead.pid]
    assert _handles(tmp_path) == [live.pid]


def test_the_handle_of_an_unreaped_zombie_is_dropped(tmp_path: Path) -> None:
    exited = subprocess.Popen(["true"])
    try:
        wait_until_sync(
            lambda: psutil.Process(exited.pid).status() == psutil.STATUS_ZOMBIE,
            timeout=10,
            interval=0.01,
        )
        _write_handles(tmp_path, [exited.pid])

        assert drop_stale_handles(tmp_path) == [exited.pid]
        assert _handles(tmp_path) == []
    finally:
        exited.wait()


def test_a_handle_whose_pid_now_names_a_later_process_is_dropped(
    tmp_path: Path, live: subprocess.Popen[bytes]
) -> None:
    # The handle was recorded for a process that started a minute before the one now
    # running under that PID: the kernel has reused it.
    _write_handles(tmp_path, [live.pid])
    started = psutil.Process(live.pid).create_time()
    (tmp_path / HANDLE_STARTS_FILE).write_text(json.dumps({str(live.pid): started - 60}))

    assert drop_stale_handles(tmp_path) == [live.pid]
    assert _handles(tmp_path) == []
    assert json.loads((tmp_path / HANDLE_STARTS_FILE).read_text()) == {}


def test_a_live_handle_is_kept_whether_or_not_its_start_was_recorded(
    tmp_path: Path, live: subprocess.Popen[bytes]
) -> None:
    other = subprocess.Popen(["sleep", "60"])
    try:
        _write_handles(tmp_path, [live.pid, other.pid])
        record_handle_start(tmp_path, live.pid)

        assert drop_stale_handles(tmp_path) == []
        assert _handles(tmp_path) == [live.pid, other.pid]
    finally:
        other.kill()
        other.wait()


def test_a_fresh_data_directory_is_left_empty_for_initdb(tmp_path: Path) -> None:
    assert drop_stale_handles(tmp_path) == []
    assert list(tmp_path.iterdir()) == []

"""``up`` owns its embedded database through crashes: real processes, real signals.

Ctrl-C (SIGINT) must end ``up`` cleanly: status 0, its ``stopped`` line, no role cut off
for outliving the stop's grace (the bound behind the README's "within 5 seconds", judged
by ``up`` itself rather than by a stopwatch on a shared machine), and, by the time it has
exited, the whole cluster gone.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from pin_sessions.platform.embedded import RESTART_ATTEMPTS
from tests.support.processes import free_port, pin_sessions, wait_until_ready
from tests.support.waiting import wait_until_sync

# ``run_roles``' line for a role still running when the grace ran out.
CUT_OFF = "did not stop in time"
RESTART_DEADLINE_SECONDS = 20


class Up:
    """One ``pin-sessions up`` on a data directory, its output appended to ``log``."""

    def __init__(self, data_dir: Path, log: Path) -> None:
        self.log = log
        self.url = f"http://127.0.0.1:{free_port()}"
        with log.open("a") as output:
            self.process = pin_sessions(
                "up",
                "--port",
                self.url.rsplit(":", 1)[1],
                env={"PIN_DATA_DIR": str(data_dir)},
                output=output,
            )

    def wait_ready(self, timeout: float = 60) -> None:
        wait_until_ready(self.url, self.process, timeout=timeout)

    def stop(self, signum: signal.Signals) -> None:
        """Send ``signum`` and wait for the process to exit (the timeout only catches a hang)."""
        self.process.send_signal(signum)
        self.process.wait(timeout=60)

    def stopped_cleanly(self) -> bool:
        """Exit status 0, the ``stopped`` line written, no role cut off by the grace."""
        output = self.output()
        return (
            self.process.returncode == 0
            and '"event": "stopped"' in output
            and (CUT_OFF not in output)
        )

    def output(self) -> str:
        return self.log.read_text()


@pytest.fixture
def pgdata(tmp_path: Path) -> Iterator[Path]:
    """The cluster of ``tmp_path/data``; whatever of it a failed test left running is shut."""
    pgdata = (tmp_path / "data" / "pg").resolve()
    yield pgdata
    leftovers = _postmasters_of(pgdata)
    for postmaster in leftovers:
        postmaster.send_signal(signal.SIGQUIT)  # immediate shutdown, children included
    _, alive = psutil.wait_procs(leftovers, timeout=10)
    for postmaster in alive:
        postmaster.kill()


@pytest.fixture
def ups(tmp_path: Path) -> Iterator[list[Up]]:
    """Every ``up`` a test starts; killed at the end if still running."""
    started: list[Up] = []
    yield started
    for up in started:
        if up.process.poll() is None:
            up.process.kill()
            up.process.wait(timeout=30)


def start_up(ups: list[Up], pgdata: Path) -> Up:
    up = Up(pgdata.parent, pgdata.parent.parent / "up.log")
    ups.append(up)
    up.wait_ready()
    return up


def test_ctrl_c_stops_postgres_after_an_up_was_killed_with_sigkill(
    pgdata: Path, ups: list[Up]
) -> None:
    killed = start_up(ups, pgdata)
    killed.stop(signal.SIGKILL)
    # The orphaned server keeps running, and the dead `up` is still listed as one of its
    # handles: the next `up` attaches to that server and must own it all the same.
    orphan = _postmaster_pid(pgdata)
    assert psutil.pid_exists(orphan)
    again = start_up(ups, pgdata)
    assert _postmaster_pid(pgdata) == orphan
    cluster = _cluster(pgdata)

    again.stop(signal.SIGINT)

    assert again.stopped_cleanly(), again.output()[-3000:]
    assert _alive(cluster) == []
    assert _postmasters_of(pgdata) == []


def test_up_restarts_a_postmaster_killed_under_it_and_ctrl_c_still_stops_everything(
    pgdata: Path, ups: list[Up]
) -> None:
    up = start_up(ups, pgdata)
    killed = _postmaster_pid(pgdata)

    os.kill(killed, signal.SIGKILL)

    _wait_for_another_postmaster(pgdata, killed, up.process)
    up.wait_ready(timeout=RESTART_DEADLINE_SECONDS)
    # The runtime's pool serves again by itself: this starts (writes) a session.
    started = httpx.post(f"{up.url}/api/user-activity/sessions/start", timeout=10)
    assert started.status_code == 200, started.text
    assert '"event": "embedded postgres restarted"' in up.output()
    cluster = _cluster(pgdata)

    up.stop(signal.SIGINT)

    assert up.stopped_cleanly(), up.output()[-3000:]
    assert _alive(cluster) == []
    assert _postmasters_of(pgdata) == []


def test_up_exits_1_with_one_line_when_its_dead_postmaster_cannot_start_again(
    pgdata: Path, ups: list[Up]
) -> None:
    up = start_up(ups, pgdata)
    # The running server never reads its configuration again; a new one refuses to start.
    with (pgdata / "postgresql.conf").open("a") as conf:
        conf.write("\nno_such_setting = 1\n")
    cluster = _cluster(pgdata)

    os.kill(_postmaster_pid(pgdata), signal.SIGKILL)

    up.process.wait(timeout=30)
    assert up.process.returncode == 1
    assert up.output().splitlines()[-1] == (
        f"pin-sessions: embedded PostgreSQL in {pgdata} died and did not start again "
        f"after {RESTART_ATTEMPTS} attempts; its log is {pgdata / 'log'}"
    )
    assert _alive(cluster) == []
    assert _postmasters_of(pgdata) == []


def _postmaster_pid(pgdata: Path) -> int:
    return int((pgdata / "postmaster.pid").read_text().split()[0])


def _cluster(pgdata: Path) -> list[psutil.Process]:
    """The running postmaster and its children, as they are now."""
    postmaster = psutil.Process(_postmaster_pid(pgdata))
    return [postmaster, *postmaster.children()]


def _alive(processes: list[psutil.Process]) -> list[psutil.Process]:
    alive = []
    for process in processes:
        try:
            if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                alive.append(process)
        except psutil.NoSuchProcess:
            pass
    return alive


def _postmasters_of(pgdata: Path) -> list[psutil.Process]:
    """Every postmaster of this data directory, whatever postmaster.pid says."""
    found = []
    for process in psutil.process_iter(["name", "cmdline"]):
        if process.info["name"] == "postgres" and str(pgdata) in (process.info["cmdline"] or []):
            found.append(process)
    return _alive(found)


def _wait_for_another_postmaster(
    pgdata: Path, killed: int, up: subprocess.Popen[str], timeout: float = RESTART_DEADLINE_SECONDS
) -> None:

    def restarted() -> bool:
        assert up.poll() is None, f"up exited with {up.returncode}"
        try:
            pid = _postmaster_pid(pgdata)
        except (FileNotFoundError, ValueError, IndexError):
            pid = killed  # being rewritten
        with contextlib.suppress(psutil.NoSuchProcess):
            return pid != killed and bool(_alive([psutil.Process(pid)]))
        return False

    wait_until_sync(restarted, timeout=timeout, interval=0.1)

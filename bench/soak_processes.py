"""The soak's processes: every role of the service as an OS process, and their cleanup.

Each role is ``python -m pin_sessions ARGS`` with its log in the run's directory. The soak
plays the orchestrator: a role killed by a fault is started again at once (the API's
workers are replaced by ``serve --workers``' own supervisor). Nothing may outlive the
soak: every child is asked to stop (SIGTERM, then SIGKILL with its descendants) by
``Fleet.stop_all`` — called from ``finally``, from ``atexit`` and from the SIGTERM
handler — and each child is put in the soak's own process group, so whoever started the
soak (a test) can end everything with one ``killpg``. The embedded PostgreSQL is the one
exception (``pg_ctl`` detaches it): its data directory is the soak's, and
:func:`stop_leftover_postgres` stops a server left there.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import httpx
import psutil

PROJECT_ROOT = Path(__file__).resolve().parents[1]
STOP_SECONDS = 20.0


@dataclass
class Role:
    """One role's process; ``start`` runs the same command again after a kill."""

    name: str
    args: list[str]
    env: dict[str, str]
    log: IO[str]
    metrics_port: int | None = None
    process: subprocess.Popen[bytes] | None = None
    starts: int = 0
    faulted: bool = False  # down on purpose (a fault), not to be restarted by the watch

    def start(self) -> None:
        command = [sys.executable, "-m", "pin_sessions", *self.args]
        if self.metrics_port is not None:
            command += ["--metrics-port", str(self.metrics_port)]
        self.process = subprocess.Popen(
            command, env=self.env, cwd=PROJECT_ROOT, stdout=self.log, stderr=self.log
        )
        self.starts += 1

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL, as a node failure would; reaped at once."""
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)

    def ready(self) -> bool:
        """Whether the process serves its metrics (it is up and wired)."""
        if self.metrics_port is None or not self.alive():
            return False
        try:
            return httpx.get(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=1).is_success
        except httpx.HTTPError:
            return False

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        family = _family(self.process.pid)
        self.process.send_signal(signal.SIGCONT)  # a frozen one could not stop
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=STOP_SECONDS)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)
        for leftover in family:
            with contextlib.suppress(psutil.Error):
                if leftover.is_running():
                    leftover.kill()


def _family(pid: int) -> list[psutil.Process]:
    with contextlib.suppress(psutil.Error):
        return psutil.Process(pid).children(recursive=True)
    return []


@dataclass
class Fleet:
    """Every role of the run, and the promise that none outlives it."""

    roles: list[Role] = field(default_factory=list)
    _stopped: bool = False

    def __post_init__(self) -> None:
        atexit.register(self.stop_all)
        signal.signal(signal.SIGTERM, _exit_on_signal)

    def add(self, role: Role) -> Role:
        self.roles.append(role)
        return role

    def named(self, name: str) -> Role:
        return next(role for role in self.roles if role.name == name)

    def stop_all(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        for role in self.roles:
            if role.alive() and role.process is not None:
                role.process.send_signal(signal.SIGCONT)
                role.process.send_signal(signal.SIGTERM)
        for role in self.roles:
            role.stop()

    def dead(self) -> list[str]:
        """Roles that exited without being killed by a fault (the soak restarts those)."""
        return [role.name for role in self.roles if role.process is not None and not role.alive()]


def _exit_on_signal(signum: int, _frame: object) -> None:
    # Unwinds through every ``finally`` (processes, database, temporary directory).
    raise SystemExit(128 + signum)


def process_tree(pid: int) -> list[psutil.Process]:
    """``pid`` and its descendants (those alive now)."""
    with contextlib.suppress(psutil.Error):
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    return []


def freeze(processes: list[psutil.Process]) -> None:
    for process in processes:
        with contextlib.suppress(psutil.Error):
            process.send_signal(signal.SIGSTOP)


def thaw(processes: list[psutil.Process]) -> None:
    for process in reversed(processes):
        with contextlib.suppress(psutil.Error):
            process.send_signal(signal.SIGCONT)


def postmaster_pid(pgdata: Path) -> int | None:
    """The postmaster of the data directory, from its ``postmaster.pid``, if it runs."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        pid = int((pgdata / "postmaster.pid").read_text().split()[0])
        if psutil.pid_exists(pid):
            return pid
    return None


def stop_leftover_postgres(pgdata: Path, timeout: float = 30.0) -> None:
    """Stop the server of ``pgdata`` (ours) if a soak that died left it running."""
    pid = postmaster_pid(pgdata)
    if pid is None:
        return
    with contextlib.suppress(ProcessLookupError):
        for process in process_tree(pid):
            process.send_signal(signal.SIGCONT)
        os.kill(pid, signal.SIGINT)  # PostgreSQL's fast shutdown
        deadline = time.monotonic() + timeout
        while psutil.pid_exists(pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        if psutil.pid_exists(pid):
            os.kill(pid, signal.SIGKILL)


def cpu_seconds(processes: list[psutil.Process]) -> float:
    """User + system CPU of the processes (and their reaped children) so far."""
    total = 0.0
    for process in processes:
        with contextlib.suppress(psutil.Error):
            times = process.cpu_times()
            total += times.user + times.system + times.children_user + times.children_system
    return total

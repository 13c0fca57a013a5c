"""What the HTTP benchmarks share: a database to run on, a free port, a server they start.

Imported by ``bench/heartbeat.py`` and ``bench/tokens.py`` (run as scripts, so this
folder is on their import path).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

START_SECONDS = 60


class BenchDatabase(NamedTuple):
    dsn: str
    # The embedded server's postmaster, for its processes' CPU; None with PIN_DATABASE_URL.
    postmaster_pid: int | None


@contextlib.contextmanager
def bench_database() -> Iterator[BenchDatabase]:
    """``PIN_DATABASE_URL`` when set, else an embedded server in a temporary directory."""
    dsn = os.environ.get("PIN_DATABASE_URL")
    if dsn:
        yield BenchDatabase(dsn, None)
        return
    from pin_sessions.platform.embedded import EmbeddedPostgres

    with tempfile.TemporaryDirectory(prefix="pin-bench-pg-") as workdir:
        embedded = EmbeddedPostgres(Path(workdir) / "pg", delete_on_stop=True)
        try:
            dsn = embedded.start()
            postmaster = int((embedded.pgdata / "postmaster.pid").read_text().split()[0])
            yield BenchDatabase(dsn, postmaster)
        finally:
            embedded.stop()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextlib.contextmanager
def running_server(command: list[str], env: dict[str, str]) -> Iterator[subprocess.Popen[bytes]]:
    """``command`` (which names its ``--port``) started, once it listens; SIGTERM after."""
    port = int(command[command.index("--port") + 1])
    process = subprocess.Popen(
        command,
        env={**os.environ, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + START_SECONDS
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
                break
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{command[2:4]} did not start")
            time.sleep(0.1)
        yield process
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)

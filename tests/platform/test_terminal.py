"""A newcomer's terminal: readable lines and every URL on a TTY, JSON lines when asked.

The commands run on a real pseudo-terminal, as in a shell. ``up`` starts on a fresh data
directory with no ``XDG_RUNTIME_DIR`` (as in a container or over ssh): nothing it depends
on may warn.
"""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import subprocess
import sys
from pathlib import Path

from tests.conftest import TEST_SECRET_KEY
from tests.support.processes import PROJECT_ROOT, free_port
from tests.support.waiting import wait_until_sync


class Terminal:
    """A command whose stdin, stdout and stderr are one pseudo-terminal."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        base = {key: os.environ[key] for key in ("PATH", "HOME", "LANG") if key in os.environ}
        master, slave = pty.openpty()
        self._master = master
        self.output = ""
        self.process = subprocess.Popen(
            [sys.executable, "-m", "pin_sessions", *args],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env={**base, **env},
            cwd=PROJECT_ROOT,
        )
        os.close(slave)

    def _read(self, seconds: float) -> bool:
        """Read what arrives within ``seconds``; False once the terminal is closed."""
        ready, _, _ = select.select([self._master], [], [], seconds)
        if not ready:
            return True
        try:
            chunk = os.read(self._master, 65536)
        except OSError:  # EIO: every writer has gone
            return False
        self.output += chunk.decode(errors="replace")
        return bool(chunk)

    def wait_for(self, text: str, timeout: float) -> None:
        def shown() -> bool:
            if text not in self.output and not self._read(0.2):
                raise AssertionError(f"closed before {text!r} was shown:\n{self.output}")
            return text in self.output

        try:
            wait_until_sync(shown, timeout=timeout, interval=0)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; shown so far:\n{self.output}") from None

    def interrupt(self) -> int:
        """Ctrl-C, then everything it printed until it exited."""
        self.process.send_signal(signal.SIGINT)
        try:
            wait_until_sync(lambda: not self._read(0.2), timeout=30, interval=0)
        finally:
            os.close(self._master)
        return self.process.wait(timeout=30)


def test_up_on_a_terminal_prints_every_url_readable_lines_and_no_dependency_warning(
    tmp_path: Path,
) -> None:
    port = free_port()
    terminal = Terminal(["up", "--port", str(port)], {"PIN_DATA_DIR": str(tmp_path / "data")})
    try:
        terminal.wait_for(f"http://127.0.0.1:{port}/metrics", timeout=120)
    finally:
        status = terminal.interrupt()
    assert status == 0, terminal.output
    base = f"http://127.0.0.1:{port}"
    for name, url in (
        ("API", base),
        ("Docs", f"{base}/docs"),
        ("Demo", f"{base}/demo"),
        ("Dashboard", f"{base}/dev-stats"),
        ("Metrics", f"{base}/metrics"),
    ):
        assert any(line.split() == [name, url] for line in terminal.output.splitlines()), name
    lines = [line for line in terminal.output.splitlines() if line.strip()]
    assert not any(line.lstrip().startswith("{") for line in lines), terminal.output
    assert any("embedded postgres ready" in line for line in lines)
    # No library's warning on a clean start (Python prints them as "...Warning: ...").
    assert "Warning:" not in terminal.output, terminal.output


def test_pin_log_format_json_keeps_json_lines_on_a_terminal(
    tmp_path: Path, database_url: str
) -> None:
    port = free_port()
    terminal = Terminal(
        ["serve", "--port", str(port)],
        {
            "PIN_DATABASE_URL": database_url,
            "PIN_DATA_DIR": str(tmp_path / "data"),
            "PIN_SECRET_KEY": TEST_SECRET_KEY,
            "PIN_LOG_FORMAT": "json",
        },
    )
    try:
        terminal.wait_for('"event": "listening"', timeout=60)
    finally:
        status = terminal.interrupt()
    assert status == 0, terminal.output
    lines = [line for line in terminal.output.splitlines() if line.strip()]
    events = [json.loads(line)["event"] for line in lines]
    assert {"listening", "stop requested"} <= set(events)


def test_a_worker_role_on_a_terminal_prints_its_metrics_url_and_readable_lines(
    tmp_path: Path, database_url: str
) -> None:
    terminal = Terminal(
        ["job", "expire-sessions", "--metrics-port", "0"],
        {
            "PIN_DATABASE_URL": database_url,
            "PIN_DATA_DIR": str(tmp_path / "data"),
            "PIN_SECRET_KEY": TEST_SECRET_KEY,
        },
    )
    try:
        terminal.wait_for("job completed", timeout=60)
    finally:
        status = terminal.interrupt()
    assert status == 0, terminal.output
    banner = [line.split() for line in terminal.output.splitlines() if "Metrics" in line]
    assert any(
        len(words) == 2
        and words[1].startswith("http://127.0.0.1:")
        and words[1].endswith("/metrics")
        for words in banner
    ), terminal.output
    lines = [line for line in terminal.output.splitlines() if line.strip()]
    assert not any(line.lstrip().startswith("{") for line in lines), terminal.output

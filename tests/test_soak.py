"""The soak (``bench/soak.py``): production's mix under faults, run for under a minute.

One run on the PostgreSQL bus with the default faults, its report asserted: every fault
ran and has its window, the books balance (every acknowledged write is in the database,
one session-ended per closed session and one dev-stats fact per event, erased users leave
no trace, the outbox drains), no 5xx outside the windows and only 503 problem+json inside,
and the service answers again within the recovery allowance (10 s here). The latency
budgets are judged and printed but not asserted: the suite shares two cores with
everything else, so a p99 in milliseconds is the machine's as much as the service's (no
wall-clock bound inside a test); ``bench/soak.py`` on a quiet machine judges them, and
a call is given up only after 60 s, so a slow answer is measured, not counted as lost.

The soak is a separate process in a process group of its own, with its roles in that
group; whatever happens, the finalizer ends the group and stops the PostgreSQL the soak
started in its directory. Marked ``soak`` (``-m "not soak"`` leaves it out of a quick
run); it holds one test process for two to six minutes, by the machine's load (its
traffic lasts until the last fault is over, and restarts are slow on a busy machine), so
it is one run asserted whole, not one run per assertion.

The rest are unit tests of the report's arithmetic (no I/O).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.append(str(BENCH))  # after everything else: bench/ names no package

from soak_processes import stop_leftover_postgres  # noqa: E402
from soak_report import Window, evaluate, percentile  # noqa: E402
from soak_run import Options  # noqa: E402
from soak_wire import TRANSPORT, Record  # noqa: E402

SOAK_SECONDS = 50
FAULTS_ON_THE_PG_BUS = {
    "kill-api-worker", "kill-consumer", "kill-job", "freeze-postgres", "freeze-broker",
    "rotate-keys",
}  # fmt: skip
SKIPPED_ON_THE_PG_BUS = {"kill-relay", "kill-broker"}


@pytest.fixture
def soak_run(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], Path]]:
    workdir = tmp_path / "soak"
    command = [
        sys.executable, str(BENCH / "soak.py"),
        "--duration", str(SOAK_SECONDS), "--devices", "60", "--rate", "25",
        "--bus", "pg", "--faults", "default", "--erasures", "2",
        "--recovery", "10", "--call-timeout", "60",
        "--workdir", str(workdir),
        "--report", str(tmp_path / "report.json"), "--plot", str(tmp_path / "soak.png"),
    ]  # fmt: skip
    env = {key: value for key, value in os.environ.items() if not key.startswith("PIN_")}
    process = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        yield process, tmp_path
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=30)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        stop_leftover_postgres(workdir / "pg")


@pytest.mark.soak
@pytest.mark.long
@pytest.mark.timeout(600)
def test_a_minute_of_production_traffic_under_faults_keeps_its_slos_and_its_books(
    soak_run: tuple[subprocess.Popen[str], Path],
) -> None:
    process, tmp_path = soak_run
    _out, err = process.communicate(timeout=540)
    report_file = tmp_path / "report.json"
    assert report_file.exists(), f"exit {process.returncode}: {err[-3000:]}"
    report = json.loads(report_file.read_text())

    windows = {window["fault"]: window for window in report["windows"]}
    ran = {name for name, window in windows.items() if window["skipped"] is None}
    assert ran == FAULTS_ON_THE_PG_BUS, windows
    assert {n for n, w in windows.items() if w["skipped"]} == SKIPPED_ON_THE_PG_BUS
    assert all(windows[name]["end"] > windows[name]["start"] for name in ran)
    assert windows["freeze-postgres"]["seconds"] >= 5
    for name, verdict in report["books"].items():
        assert verdict["holds"], f"{name}: {json.dumps(verdict)}"
    for name, verdict in report["slo"].items():
        if name != "p99WithinBudget":  # judged, printed, not asserted: see the docstring
            assert verdict["holds"], f"{name}: {json.dumps(verdict)}"
    assert not report["failures"], report["failures"]
    print(json.dumps(report["slo"]["p99WithinBudget"]))
    scenario = report["scenario"]
    assert scenario["signIns"] > 0 and scenario["erasuresByRoute"] + scenario["erasuresByCli"] > 0
    assert report["books"]["devStatsOneFactPerSessionEnded"]["facts"] > 0
    assert {"heartbeat", "action", "property view", "oauth token", "dev-stats export"} <= set(
        report["routes"]
    )
    assert (tmp_path / "soak.png").stat().st_size > 10_000
    assert process.returncode in (0, 1), err[-3000:]  # 1: a budget was over (not asserted)


# --- the report's arithmetic -------------------------------------------------------------


def _record(route: str, sent: float, latency: float, status: int | str, **kw: Any) -> Record:
    return Record(route, sent, sent + latency, status, kw.get("expected", False),
                  kw.get("problem", False), kw.get("code"))  # fmt: skip


def test_percentile_is_nearest_rank() -> None:
    assert percentile([], 0.99) is None
    assert percentile([3.0, 1.0, 2.0], 0.5) == 2.0
    assert percentile([float(i) for i in range(1, 101)], 0.99) == 99.0


def test_a_call_overlapping_a_fault_or_its_recovery_is_judged_in_the_window() -> None:
    window = Window("freeze-postgres", start=10.0, end=15.0)
    records = [
        _record("heartbeat", 1.0, 0.01, 200),
        _record("heartbeat", 9.5, 1.0, 503, problem=True, code="SERVICE_UNAVAILABLE"),
        _record("heartbeat", 16.0, 0.5, 200),  # within the recovery allowance: slow is fine
        _record("heartbeat", 25.0, 0.01, 200),
    ]
    judged = evaluate(records, [window], recovery=5.0, budget_scale=1.0)
    assert judged["slo"]["no5xxOutsideWindows"]["holds"]
    assert judged["slo"]["onlyProblem503InWindows"]["holds"]
    assert judged["slo"]["p99WithinBudget"]["holds"]
    [report] = judged["windows"]
    assert report["requests"] == 2
    assert report["recoverySeconds"] == 1.5


def test_a_500_in_a_window_a_503_outside_and_a_slow_route_each_break_their_slo() -> None:
    window = Window("kill-job", start=10.0, end=12.0)
    records = [
        _record("action", 11.0, 0.01, 500, problem=True),
        _record("action", 30.0, 0.01, 503, problem=True),
        _record("dev-stats summary", 40.0, 0.5, 200),
    ]
    slo = evaluate(records, [window], recovery=5.0, budget_scale=1.0)["slo"]
    assert not slo["onlyProblem503InWindows"]["holds"]
    assert not slo["no5xxOutsideWindows"]["holds"]
    assert slo["p99WithinBudget"]["over"] == ["dev-stats summary: p99 500.0 ms > 200 ms"]
    assert not slo["recoveryWithinSeconds"]["holds"]  # nothing succeeded after the kill


def test_the_warm_up_excuses_latency_but_no_error() -> None:
    records = [
        _record("start", 1.0, 0.6, 200),
        _record("start", 2.0, 0.01, 503, problem=True),
        _record("start", 20.0, 0.02, 200),
    ]
    judged = evaluate(records, [], recovery=5, budget_scale=1, warmup=12.0)
    assert judged["slo"]["p99WithinBudget"]["holds"]
    assert not judged["slo"]["no5xxOutsideWindows"]["holds"]
    assert judged["routes"]["start"]["warmUp"]["p99Ms"] == 600.0
    assert judged["routes"]["start"]["outsideWindows"]["p99Ms"] == 20.0
    cold = evaluate(records, [], recovery=5, budget_scale=1)["slo"]["p99WithinBudget"]
    assert cold["over"] == ["start: p99 600.0 ms > 100 ms"]


def test_the_drivers_lag_is_reported_apart_outside_the_windows_and_the_warm_up() -> None:
    windows = [Window("freeze-postgres", 10.0, 15.0), Window("kill-job", 12.0, 13.0),
               Window("kill-relay", 30.0, 30.0, skipped="no relay")]  # fmt: skip
    # (due, seconds late): in the warm-up, in the joined windows and their recovery, calm.
    lags = [(1.0, 2.0), (11.0, 4.0), (19.5, 3.0), (21.0, 0.002), (31.0, 0.004)]
    lag = evaluate([], windows, recovery=5, budget_scale=1, warmup=5.0, lags=lags)["driverLag"]
    assert lag == {"p99Ms": 4000.0, "calls": 5, "outsideWindowsP99Ms": 4.0,
                   "outsideWindowsCalls": 2}  # fmt: skip


def test_a_long_runs_faults_leave_calm_between_them_and_a_short_runs_fit() -> None:
    def options(duration: float, gap: float | None = None) -> Options:
        return Options(
            duration=duration, devices=100, rate=25, bus="pg", faults="default",
            database_url=None, report=None, plot=None, erasures=2, seed=27, budget_scale=1.0,
            recovery=5.0, closer_threshold=8.0, pause=5.0, workdir=None, gap=gap,
        )  # fmt: skip

    assert options(1200).gap_seconds == 25.0  # 20 s of calm after each recovery allowance
    assert options(50).gap_seconds == 2.5
    assert options(1200, gap=7).gap_seconds == 7


def test_broken_connections_are_allowed_only_when_an_api_worker_is_killed() -> None:
    calls = [_record("heartbeat", 10.5, 0.0, TRANSPORT), _record("heartbeat", 13.0, 0.01, 200)]
    killed = evaluate(calls, [Window("kill-api-worker", 10.0, 12.0)], recovery=5, budget_scale=1)
    frozen = evaluate(calls, [Window("freeze-postgres", 10.0, 12.0)], recovery=5, budget_scale=1)
    assert killed["slo"]["onlyProblem503InWindows"]["holds"]
    assert not frozen["slo"]["onlyProblem503InWindows"]["holds"]


def test_an_unexplained_4xx_is_a_finding_and_an_expected_one_is_not() -> None:
    records = [
        _record("heartbeat", 1.0, 0.01, 401, expected=True, problem=True),
        _record("action", 2.0, 0.01, 422, problem=True, code="VALIDATION_FAILED"),
    ]
    verdict = evaluate(records, [], recovery=5, budget_scale=1)["slo"]["noUnexplainedClientErrors"]
    assert verdict["count"] == 1
    assert verdict["byStatus"] == {"action 422 VALIDATION_FAILED": 1}

"""Production's mix under faults: every role as a process, realistic traffic, the books at the end.

    python bench/soak.py [--duration 300 | --minutes 5] [--devices 400] [--rate 100]
                         [--bus pg|kafka] [--faults default|none|all] [--database-url URL]
                         [--report soak.json] [--plot soak.png]

Starts the service as it is deployed — ``pin-sessions serve --workers 2``, every job
(``activity-closer`` with an inactivity threshold of a few seconds, so sessions end within
the run), every consumer and, on Kafka, the relay, and ``signing-keys`` — on a PostgreSQL
of its own (embedded, in the run's directory) or, with ``--database-url``, a new database
it creates on that server and migrates with ``pin-sessions migrate``. Sign-in codes go
out through the webhook SMS gateway to a receiver in the driver (``soak_sms``).

Then it drives, all at once, for ``--duration`` seconds: heartbeats from ``--devices``
devices, each on its own interval (``--rate`` per second in all), session starts from
new devices, sign-ins by the codes the webhook receives, links, actions and property views
with ``Idempotency-Key`` (retried with the same key), refreshes, a few erasures, a service
fetching client-credentials tokens and introspecting, and a dev-stats viewer reading the
summary and exporting (``soak_traffic``, ``soak_services``). Meanwhile the faults of
``--faults default`` run one after another, ``--gap`` seconds apart (``soak_faults``).
Traffic goes on until the last fault has been over for a while.

At the end the outbox drains and the books are reconciled (``soak_books``); the SLOs are
judged per route and per fault window (``soak_report``), the latencies of the first
``--warmup`` seconds (by default the 10 % before the first fault, while the devices arrive)
reported apart.
``--report`` gets the JSON, ``--plot`` a PNG of throughput and p99 per route over time
with the faults shaded (``soak_plot``); by default both go to
``soak-<bus>-<start time>.json``/``.png`` in the current directory. Prints a summary;
exits 0 when ``ok``, 1 when not.

The load generator shares the machine with the service: the report gives its CPU per
call, the share of the cores that was busy, idle and stolen (/proc/stat), and the CPU of
the API and PostgreSQL processes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from soak_run import Options, run

BUDGET_SCALE_HELP = (
    "multiply every p99 budget by this (a machine shared with other work); the report says so"
)


def parse(argv: list[str] | None = None) -> Options:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    length = parser.add_mutually_exclusive_group()
    length.add_argument("--duration", type=float, default=300.0, help="seconds of traffic")
    length.add_argument("--minutes", type=float, default=None, help="minutes of traffic")
    parser.add_argument("--devices", type=int, default=400)
    parser.add_argument("--rate", type=float, default=100.0, help="heartbeats per second")
    parser.add_argument("--bus", choices=("pg", "kafka"), default="pg")
    parser.add_argument(
        "--faults",
        choices=("default", "none", "all"),
        default="default",
        help="all: the default ones, then a session row held locked (SPEC §11)",
    )
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--report", type=Path, default=None)
    parser.add_argument("--plot", type=Path, default=None)
    parser.add_argument("--workdir", type=Path, default=None, help="keep logs here")
    parser.add_argument("--erasures", type=int, default=4)
    parser.add_argument("--seed", type=int, default=27)
    parser.add_argument("--budget-scale", type=float, default=1.0, help=BUDGET_SCALE_HELP)
    parser.add_argument("--recovery", type=float, default=5.0, help="seconds (SLO)")
    parser.add_argument("--closer-threshold", type=float, default=8.0, help="seconds")
    parser.add_argument("--pause", type=float, default=5.0, help="seconds a freeze lasts")
    parser.add_argument(
        "--warmup",
        type=float,
        default=None,
        help="seconds over which the devices first arrive, their latencies reported apart, "
        "before the first fault (default: the first 10 %% of the run)",
    )
    parser.add_argument(
        "--gap",
        type=float,
        default=None,
        help="seconds from one fault's end to the next one's start (default: 5 %% of the run, "
        "between 2 s and the recovery allowance + 20 s)",
    )
    parser.add_argument(
        "--call-timeout", type=float, default=10.0, help="seconds before a call is given up"
    )
    args = parser.parse_args(argv)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return Options(
        duration=args.duration if args.minutes is None else args.minutes * 60,
        devices=args.devices,
        rate=args.rate,
        bus=args.bus,
        faults=args.faults,
        database_url=args.database_url,
        report=args.report or Path(f"soak-{args.bus}-{stamp}.json"),
        plot=args.plot or Path(f"soak-{args.bus}-{stamp}.png"),
        erasures=args.erasures,
        seed=args.seed,
        budget_scale=args.budget_scale,
        recovery=args.recovery,
        closer_threshold=args.closer_threshold,
        pause=args.pause,
        call_timeout=args.call_timeout,
        workdir=args.workdir,
        warmup=args.warmup,
        gap=args.gap,
    )


def main() -> None:
    options = parse()
    if options.workdir is not None:
        options.workdir.mkdir(parents=True, exist_ok=True)
        report = _run_in(options, options.workdir)
    else:
        with tempfile.TemporaryDirectory(prefix="pin-soak-") as workdir:
            report = _run_in(options, Path(workdir))
    print(json.dumps(_summary(report), indent=2))
    sys.exit(0 if report["ok"] else 1)


def _run_in(options: Options, workdir: Path) -> dict[str, Any]:
    options.workdir = workdir
    try:
        import uvloop

        return uvloop.run(run(options))
    except ImportError:  # pragma: no cover - uvloop is a runtime dependency
        return asyncio.run(run(options))


def _summary(report: dict[str, Any]) -> dict[str, Any]:
    """What the terminal shows: verdicts and the figures behind them, not every route."""
    return {
        "ok": report["ok"],
        "run": report["run"],
        "slo": {name: verdict["holds"] for name, verdict in report["slo"].items()},
        "books": {name: verdict["holds"] for name, verdict in report["books"].items()},
        "machine": report["machine"],
        "failures": report["failures"],
        "report": str(report["run"].get("reportFile")),
        "pid": os.getpid(),
    }


if __name__ == "__main__":
    main()

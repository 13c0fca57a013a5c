"""Every job's metric families — names, types, help texts, labels and the series that exist
from the start — exactly as the deployment's alerts, dashboards and seed 000 know them.

The expected exposition (``job_metrics.prom``) is each job worker's registry right after it
is built, values at zero and ``_created`` samples left out. A change to a job's declaration
that renames, retypes, relabels or rewords a metric fails here first.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from opentelemetry import trace
from prometheus_client import CollectorRegistry, generate_latest

from pin_sessions.bootstrap.jobs import JOB_WORKERS
from pin_sessions.platform.ids import new_id
from pin_sessions.platform.jobs import JobRun
from tests.support.runtime import unconnected_runtime

EXPECTED = Path(__file__).with_name("job_metrics.prom")


def exposition_of_every_job() -> str:
    sections = []
    for name, build in JOB_WORKERS.items():
        registry = CollectorRegistry()
        build(unconnected_runtime(registry))
        lines = [
            line
            for line in generate_latest(registry).decode().splitlines()
            if not _family(line).endswith("_created")
        ]
        sections.append("\n".join([f"## {name}", *lines]))
    return "\n".join(sections) + "\n"


def _family(line: str) -> str:
    """The metric a line of the exposition is about (a sample, or its HELP or TYPE)."""
    words = line.removeprefix("# HELP ").removeprefix("# TYPE ")
    return words.split("{")[0].split(" ")[0]


def test_every_job_exports_the_metric_families_it_always_has() -> None:
    assert exposition_of_every_job() == EXPECTED.read_text()


# Each job's ``--once`` JSON (and ``job completed`` line) keys, in the order they are printed:
# the runbook, the benches and black-box checks read them by name.
RESULT_KEYS = {
    "expire-sessions": [
        "jobRunId",
        "refreshExpired",
        "sicrExpired",
        "durationMs",
        "backlogRemaining",
    ],
    "session-retention": ["jobRunId", "sicrDeleted", "refreshDeleted", "durationMs"],
    "activity-closer": ["jobRunId", "closed", "viewsClosed", "durationMs", "backlogRemaining"],
    "activity-retention": [
        "jobRunId",
        "sessionsDeleted",
        "actionEventsDeleted",
        "propertyObjectViewsDeleted",
        "idempotencyKeysDeleted",
        "durationMs",
    ],
    "signing-keys": ["jobRunId", "created", "activated", "retired", "dropped", "durationMs"],
}
# Key ids, listed: the other counts are numbers.
LISTED_KEYS = {"created", "activated", "retired", "dropped"}


def test_every_job_prints_the_result_keys_it_always_has_in_their_order() -> None:
    assert set(JOB_WORKERS) == set(RESULT_KEYS)
    for name, build in JOB_WORKERS.items():
        runtime = unconnected_runtime()
        worker = build(runtime)
        run = JobRun(
            id=new_id(),
            spec=worker.spec,
            metrics=worker.metrics,
            stop=asyncio.Event(),
            tracer=trace.get_tracer(__name__),
            clock=runtime.clock,
        )
        document = run.result().to_json()
        assert list(document) == RESULT_KEYS[name], name
        for key, value in document.items():
            if key in LISTED_KEYS:
                assert value == [], (name, key)
            elif key not in ("jobRunId", "backlogRemaining"):
                assert value == 0 or key == "durationMs", (name, key)

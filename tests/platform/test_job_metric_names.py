"""Every job's metric families — names, types, help texts, labels and the series that exist
from the start — exactly as the deployment's alerts, dashboards and seed 000 know them.

The expected exposition (``job_metrics.prom``) is each job worker's registry right after it
is built, values at zero and ``_created`` samples left out. A change to a job's declaration
that renames, retypes, relabels or rewords a metric fails here first.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest

from pin_sessions.bootstrap import JOB_WORKERS, resolve_server_secrets
from pin_sessions.platform.clock import FixedClock
from pin_sessions.platform.database import Database
from pin_sessions.platform.runtime import Runtime
from pin_sessions.settings import load_settings

EXPECTED = Path(__file__).with_name("job_metrics.prom")
# Never opened: building a worker connects to nothing.
UNUSED_DSN = "postgresql://localhost/unused"


def exposition_of_every_job() -> str:
    settings = load_settings({"PIN_SECRET_KEY": "x" * 40, "PIN_DATABASE_URL": UNUSED_DSN})
    sections = []
    for name, build in JOB_WORKERS.items():
        registry = CollectorRegistry()
        build(
            Runtime(
                settings=settings,
                database=Database(UNUSED_DSN),
                clock=FixedClock(datetime(2026, 1, 1, tzinfo=UTC)),
                registry=registry,
                secrets=resolve_server_secrets(settings),
            )
        )
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

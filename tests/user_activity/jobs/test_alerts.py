"""The shipped user-activity alert rules refer only to metrics the jobs really export."""

from __future__ import annotations

from pathlib import Path

import yaml
from prometheus_client import CollectorRegistry

from pin_sessions.bootstrap import JOB_WORKERS
from pin_sessions.platform.runtime import Runtime
from tests.identity.jobs.test_alerts import exported_names, metric_names

ALERTS_FILE = (
    Path(__file__).resolve().parents[3] / "deploy" / "prometheus" / "user_activity_alerts.yml"
)


def test_the_closer_alerts_are_shipped_and_use_only_exported_metrics(
    runtime: Runtime, registry: CollectorRegistry
) -> None:
    JOB_WORKERS["activity-closer"](runtime)
    JOB_WORKERS["activity-retention"](runtime)
    exported = exported_names(registry)
    rules = [
        rule
        for group in yaml.safe_load(ALERTS_FILE.read_text(encoding="utf-8"))["groups"]
        for rule in group["rules"]
    ]

    assert {rule["alert"] for rule in rules} == {
        "UserActivityActivityCloserStalled",
        "UserActivityActivityCloserBacklogGrowing",
        "UserActivityActivityCloserErrors",
        "UserActivityActivityRetentionStalled",
    }
    for rule in rules:
        referenced = metric_names(rule["expr"])
        assert referenced, rule["alert"]
        assert referenced <= exported, (rule["alert"], referenced - exported)

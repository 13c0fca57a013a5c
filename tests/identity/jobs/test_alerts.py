"""The shipped alert rules refer only to metrics the ExpireSessionsJob really exports."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from prometheus_client import CollectorRegistry

from pin_sessions.bootstrap import JOB_WORKERS
from pin_sessions.platform.runtime import Runtime

ALERTS_FILE = Path(__file__).resolve().parents[3] / "deploy" / "prometheus" / "alerts.yml"

# Labels Prometheus itself attaches to every scraped series.
_TARGET_LABELS = {"instance", "job"}
_LABEL_REFERENCE = re.compile(r"\$labels\.([A-Za-z_][A-Za-z0-9_]*)")

_PROMQL_KEYWORDS = {"and", "or", "unless", "by", "without", "on", "ignoring", "bool", "offset"}
_IDENTIFIER = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")


def metric_names(expr: str) -> set[str]:
    """The metric names an expression selects: identifiers that are not functions,
    keywords, label matchers, grouping labels or range durations."""
    text = re.sub(r"\[[^\]]*\]", " ", expr)  # range selectors: [30m]
    text = re.sub(r"\{[^}]*\}", " ", text)  # label matchers
    text = re.sub(r"\b(?:by|without|on|ignoring)\s*\([^)]*\)", " ", text)
    names = set()
    for match in _IDENTIFIER.finditer(text):
        following = text[match.end() :].lstrip()[:1]
        if following != "(" and match.group() not in _PROMQL_KEYWORDS:
            names.add(match.group())
    return names


def exported_names(registry: CollectorRegistry) -> set[str]:
    return {sample.name for family in registry.collect() for sample in family.samples}


def shipped_rules() -> list[dict[str, Any]]:
    return [
        rule
        for group in yaml.safe_load(ALERTS_FILE.read_text(encoding="utf-8"))["groups"]
        for rule in group["rules"]
    ]


def test_the_seed_alerts_are_shipped_and_use_only_exported_metrics(
    runtime: Runtime, registry: CollectorRegistry
) -> None:
    JOB_WORKERS["expire-sessions"](runtime)
    exported = exported_names(registry)
    rules = shipped_rules()

    assert {rule["alert"] for rule in rules} == {
        "IdentityExpireSessionsStalled",
        "IdentityExpireSessionsBacklogGrowing",
        "IdentityExpireSessionsErrors",
    }
    for rule in rules:
        referenced = metric_names(rule["expr"])
        assert referenced, rule["alert"]
        assert referenced <= exported, (rule["alert"], referenced - exported)


def test_the_alert_texts_name_only_labels_the_series_carry(
    runtime: Runtime, registry: CollectorRegistry
) -> None:
    # Seed 000's metrics are single series: no alert text may promise a `phase`.
    JOB_WORKERS["expire-sessions"](runtime)
    carried = _TARGET_LABELS | {
        label
        for family in registry.collect()
        for sample in family.samples
        for label in sample.labels
    }
    for rule in shipped_rules():
        used = set(_LABEL_REFERENCE.findall(yaml.safe_dump(rule.get("annotations", {}))))
        assert used <= carried, (rule["alert"], used - carried)


def test_the_metric_name_reader_finds_names_and_skips_the_rest() -> None:
    expr = (
        "min_over_time(a_backlog[30m]) > 0 and deriv(a_backlog[30m]) > 0 "
        'or sum by (phase) (b_total{phase="x"}) or absent(c_seconds)'
    )
    assert metric_names(expr) == {"a_backlog", "b_total", "c_seconds"}

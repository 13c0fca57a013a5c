"""What the deployment artefacts say about metrics: names in PromQL, names on /metrics."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

PROJECT_ROOT = Path(__file__).resolve().parents[2]
RULES_DIR = PROJECT_ROOT / "deploy" / "prometheus"
DASHBOARDS_DIR = PROJECT_ROOT / "deploy" / "grafana"

# Series Prometheus makes itself for every target, which no process exports.
PROMETHEUS_SERIES = frozenset({"up"})

_KEYWORDS = frozenset(
    {"and", "or", "unless", "by", "without", "on", "ignoring", "bool", "offset", "group_left"}
    | {"group_right", "inf", "nan"}
)
_IDENTIFIER = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')


def metric_names(expr: str) -> set[str]:
    """The metric names an expression selects: identifiers that are not functions,
    keywords, label matchers, grouping labels, strings or durations."""
    text = _STRING.sub(" ", expr)
    text = re.sub(r"\[[^\]]*\]", " ", text)  # range and subquery selectors: [30m], [5m:1m]
    text = re.sub(r"\{[^}]*\}", " ", text)  # label matchers
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    text = re.sub(r"\boffset\s+-?\w+", " ", text)
    text = re.sub(r"\b\d[\w.]*", " ", text)  # numbers, 1e3, 0x1f
    names = set()
    for match in _IDENTIFIER.finditer(text):
        following = text[match.end() :].lstrip()[:1]
        if following != "(" and match.group().lower() not in _KEYWORDS:
            names.add(match.group())
    return names


def exported_metric_names(exposition: str) -> set[str]:
    """Every name a query may select from a Prometheus text exposition, also the families
    with no sample yet (a labelled counter before its first increment)."""
    names = set()
    for line in exposition.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            names.add(name)
            if kind == "histogram":
                names |= {f"{name}_bucket", f"{name}_count", f"{name}_sum"}
            elif kind == "summary":
                names |= {f"{name}_count", f"{name}_sum"}
        elif line and not line.startswith("#"):
            names.add(re.split(r"[{ ]", line, maxsplit=1)[0])
    return names


def rules_files() -> list[Path]:
    return sorted(RULES_DIR.glob("*.yml"))


def alert_rules() -> list[dict[str, Any]]:
    """Every alerting rule shipped in deploy/prometheus, in file order."""
    return [
        rule
        for path in rules_files()
        for group in yaml.safe_load(path.read_text(encoding="utf-8"))["groups"]
        for rule in group["rules"]
    ]


def dashboards() -> dict[str, dict[str, Any]]:
    """Every Grafana dashboard in deploy/grafana, by file name."""
    return {
        path.name: json.loads(path.read_text(encoding="utf-8"))
        for path in sorted(DASHBOARDS_DIR.glob("*.json"))
    }


def dashboard_expressions() -> list[tuple[str, str]]:
    """(where, expr) of every query of every dashboard panel."""
    return [
        (f"{name}: {panel['title']} {target['refId']}", target["expr"])
        for name, dashboard in dashboards().items()
        for panel in dashboard["panels"]
        for target in panel.get("targets", [])
    ]


def rule_expressions() -> list[tuple[str, str]]:
    return [(f"rule {rule['alert']}", rule["expr"]) for rule in alert_rules()]

"""The alert rules (SPEC §9): promtool accepts them, and each alert is unit-tested firing
and not firing; every role has its alerts; every alert has its runbook section."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections import defaultdict
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml
from prometheus_client import CollectorRegistry

from pin_sessions.bootstrap.delivery import CONSUMERS
from pin_sessions.bootstrap.jobs import JOB_WORKERS
from pin_sessions.platform.runtime import Runtime
from tests.support.promql import PROJECT_ROOT, alert_rules, rules_files

RULE_TESTS_DIR = Path(__file__).resolve().parent / "rule_tests"
RUNBOOK = PROJECT_ROOT / "docs" / "operations.md"


def promtool(*args: str, cwd: Path = PROJECT_ROOT) -> subprocess.CompletedProcess[str]:
    """Debian's `prometheus` package ships promtool; the tests fail, never skip, without it."""
    binary = shutil.which("promtool")
    assert binary, "promtool not found: apt-get install prometheus (see README)"
    return subprocess.run(
        [binary, *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )


def rule_test_files() -> list[Path]:
    return sorted(RULE_TESTS_DIR.glob("*.test.yml"))


def test_promtool_accepts_every_rules_file() -> None:
    files = [str(path) for path in rules_files()]
    assert files

    checked = promtool("check", "rules", *files)

    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_every_alert_passes_its_promtool_unit_tests() -> None:
    tested = promtool(
        "test", "rules", *(path.name for path in rule_test_files()), cwd=RULE_TESTS_DIR
    )

    assert tested.returncode == 0, tested.stdout + tested.stderr


def _alert_key(alert: str, labels: dict[str, Any]) -> tuple[str, tuple[tuple[str, str], ...]]:
    # Rules sharing a name (PinConsumerDown) are told apart by their labels.
    return alert, tuple(sorted((k, str(v)) for k, v in labels.items() if k != "severity"))


def test_every_alert_is_unit_tested_both_firing_and_not_firing() -> None:
    rules = {_alert_key(rule["alert"], rule.get("labels", {})) for rule in alert_rules()}
    fired: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
    quiet: set[str] = set()
    tested_files: set[Path] = set()
    for path in rule_test_files():
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
        tested_files |= {(path.parent / name).resolve() for name in document["rule_files"]}
        for case in (check for test in document["tests"] for check in test["alert_rule_test"]):
            if not case["exp_alerts"]:
                quiet.add(case["alertname"])
            for expected in case["exp_alerts"]:
                fired |= {
                    key
                    for key in rules
                    if key[0] == case["alertname"] and set(key[1]) <= _labels(expected)
                }

    assert tested_files == {path.resolve() for path in rules_files()}
    assert rules - fired == set(), "never seen firing"
    assert {alert for alert, _ in rules} - quiet == set(), "never seen quiet"


def _labels(expected: dict[str, Any]) -> set[tuple[str, str]]:
    return {(k, str(v)) for k, v in expected.get("exp_labels", {}).items()}


def test_every_job_has_a_stalled_alert_on_its_exported_interval(runtime: Runtime) -> None:
    exprs = {rule["alert"]: rule["expr"] for rule in alert_rules()}
    for name, build in JOB_WORKERS.items():
        worker = build(_with_registry(runtime))
        prefix = worker.spec.metric_prefix
        stalled = [
            expr for expr in exprs.values() if f"{prefix}_last_success_timestamp_seconds" in expr
        ]
        assert len(stalled) == 1, name
        # The threshold is the gauge the job exports, never a number typed into the rule.
        assert f"2 * max({prefix}_polling_interval_seconds)" in stalled[0], name
        assert f"{prefix}_errors_total" in " ".join(exprs.values()), name


def _with_registry(runtime: Runtime) -> Runtime:
    return replace(runtime, registry=CollectorRegistry())


def test_every_delivery_role_and_the_api_have_a_down_alert() -> None:
    down = {
        (rule["alert"], rule.get("labels", {}).get("consumer")): rule["expr"]
        for rule in alert_rules()
        if rule["alert"].endswith("Down")
    }

    assert down.pop(("PinApiDown", None)) == 'absent(up{job="pin-sessions-api"} == 1)'
    assert down.pop(("PinRelayDown", None)) == 'absent(up{job="pin-sessions-relay"} == 1)'
    assert down == {
        ("PinConsumerDown", name): f'absent(up{{job="pin-sessions-consume-{name}"}} == 1)'
        for name in CONSUMERS
    }


def test_alert_texts_name_only_labels_the_alert_carries() -> None:
    for rule in alert_rules():
        text = yaml.safe_dump(rule.get("annotations", {}))
        used = set(re.findall(r"\$labels\.([A-Za-z_][A-Za-z0-9_]*)", text))
        kept = {
            label.strip()
            for clause in re.findall(r"\bby\s*\(([^)]*)\)", rule["expr"])
            for label in clause.split(",")
        }
        assert used <= kept | set(rule.get("labels", {})), (rule["alert"], used - kept)


def _slug(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_alert_has_a_runbook_section() -> None:
    anchors = {
        _slug(line.lstrip("#"))
        for line in RUNBOOK.read_text(encoding="utf-8").splitlines()
        if line.startswith("#")
    }
    by_link: dict[str, set[str]] = defaultdict(set)
    for rule in alert_rules():
        by_link[rule["annotations"]["runbook"]].add(rule["alert"])

    for link, alerts in by_link.items():
        page, _, anchor = link.partition("#")
        assert page == "docs/operations.md", alerts
        assert anchor in anchors, alerts
        assert {_slug(alert) for alert in alerts} == {anchor}, alerts

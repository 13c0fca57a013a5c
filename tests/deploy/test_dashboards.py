"""The Grafana dashboards (SPEC §9): well-formed, every query valid PromQL, and together
they show every metric the API, the jobs and the delivery roles export."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml
from prometheus_client import CollectorRegistry

from pin_sessions.bootstrap.jobs import JOB_WORKERS
from pin_sessions.platform.messaging.metrics import MessagingMetrics
from pin_sessions.platform.metrics import HttpMetrics
from pin_sessions.platform.runtime import Runtime
from tests.deploy.test_alert_rules import promtool
from tests.support.promql import dashboard_expressions, dashboards, metric_names

GRID_COLUMNS = 24
# What Grafana substitutes before a query reaches Prometheus.
GRAFANA_VARIABLES = {"$__rate_interval": "5m"}


def _panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    return [panel for panel in dashboard["panels"] if panel["type"] != "row"]


def test_every_dashboard_is_well_formed() -> None:
    shipped = dashboards()
    assert set(shipped) == {
        "pin-sessions-api.json",
        "pin-sessions-jobs.json",
        "pin-sessions-delivery.json",
    }
    assert len({dashboard["uid"] for dashboard in shipped.values()}) == len(shipped)
    for name, dashboard in shipped.items():
        variables = {v["name"]: v for v in dashboard["templating"]["list"]}
        assert variables["datasource"]["query"] == "prometheus", name
        assert len({panel["id"] for panel in dashboard["panels"]}) == len(dashboard["panels"])
        _assert_no_overlap(name, [panel["gridPos"] for panel in dashboard["panels"]])
        for panel in _panels(dashboard):
            where = f"{name}: {panel['title']}"
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, where
            assert panel["description"], where
            refs = [target["refId"] for target in panel["targets"]]
            assert refs and len(set(refs)) == len(refs), where


def _assert_no_overlap(name: str, grid: list[dict[str, int]]) -> None:
    taken: set[tuple[int, int]] = set()
    for pos in grid:
        assert pos["x"] + pos["w"] <= GRID_COLUMNS, (name, pos)
        cells = {
            (x, y)
            for x in range(pos["x"], pos["x"] + pos["w"])
            for y in range(pos["y"], pos["y"] + pos["h"])
        }
        assert not cells & taken, (name, pos)
        taken |= cells


def test_every_dashboard_query_is_valid_promql(tmp_path: Path) -> None:
    # promtool parses each query as a recording rule: the same parser Prometheus runs.
    rules = []
    for n, (_, expr) in enumerate(dashboard_expressions()):
        for variable, value in GRAFANA_VARIABLES.items():
            expr = expr.replace(variable, value)
        assert "$" not in expr, expr
        rules.append({"record": f"dashboard:query:{n}", "expr": expr})
    path = tmp_path / "dashboards.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]}))

    checked = promtool("check", "rules", str(path))

    assert checked.returncode == 0, checked.stdout + checked.stderr


def _families(registry: CollectorRegistry) -> set[str]:
    return {family.name for family in registry.collect()}


def _shown(dashboard: str) -> set[str]:
    return {
        name
        for where, expr in dashboard_expressions()
        if where.startswith(f"{dashboard}:")
        for name in metric_names(expr)
    }


def _missing(families: Iterable[str], shown: set[str]) -> set[str]:
    """Families no query selects (a histogram is shown by its _bucket or _count)."""
    return {f for f in families if not any(name.startswith(f) for name in shown)}


def test_the_api_dashboard_shows_rate_errors_and_latency_by_route() -> None:
    registry = CollectorRegistry()
    HttpMetrics.register(registry)
    queries = [
        expr for where, expr in dashboard_expressions() if where.startswith("pin-sessions-api")
    ]

    assert _missing(_families(registry), _shown("pin-sessions-api.json")) == set()
    assert any('status=~"5.."' in expr for expr in queries)
    assert any("by (route" in expr and "_bucket" in expr for expr in queries)


def test_the_jobs_dashboard_shows_every_metric_of_every_job(runtime: Runtime) -> None:
    registry = CollectorRegistry()
    for build in JOB_WORKERS.values():
        build(replace(runtime, registry=registry))

    assert _missing(_families(registry), _shown("pin-sessions-jobs.json")) == set()


def test_the_delivery_dashboard_shows_every_outbox_and_consumer_metric() -> None:
    registry = CollectorRegistry()
    MessagingMetrics.register(registry)

    assert _missing(_families(registry), _shown("pin-sessions-delivery.json")) == set()

"""Every PromQL expression the deployment ships — alert rules and dashboards — selects only
metrics the service really exports, read from a live `/metrics` of `pin-sessions up`."""

from __future__ import annotations

from tests.support.processes import metrics_of_up
from tests.support.promql import (
    PROMETHEUS_SERIES,
    dashboard_expressions,
    exported_metric_names,
    metric_names,
    rule_expressions,
)


async def test_every_expression_selects_only_metrics_the_service_exports(
    settings_env: dict[str, str],
) -> None:
    exported = exported_metric_names(await metrics_of_up(settings_env))
    known = exported | PROMETHEUS_SERIES

    expressions = rule_expressions() + dashboard_expressions()
    unknown = {where: metric_names(expr) - known for where, expr in expressions}

    assert len(expressions) > 40
    assert all(metric_names(expr) for _, expr in expressions)
    assert {where: names for where, names in unknown.items() if names} == {}


def test_the_metric_name_reader_finds_names_and_skips_the_rest() -> None:
    expr = (
        "min_over_time(a_backlog[30m]) > 0 and deriv(a_backlog[30m]) > 0 "
        'or sum by (phase) (b_total{phase="x"}) or absent(c_seconds) '
        "or histogram_quantile(0.99, sum by (route, le) (rate(d_bucket[$__rate_interval]))) "
        "or (e_total unless e_total offset 15m) > 2 * max(f_seconds) "
        'or label_replace(g, "dst", "$1", "src", "(.*)")'
    )
    assert metric_names(expr) == {
        "a_backlog",
        "b_total",
        "c_seconds",
        "d_bucket",
        "e_total",
        "f_seconds",
        "g",
    }


def test_the_exposition_reader_knows_families_that_have_no_sample_yet() -> None:
    exposition = "\n".join(
        [
            "# HELP pin_consumer_dead_lettered_total Messages parked",
            "# TYPE pin_consumer_dead_lettered_total counter",
            "# TYPE pin_http_request_duration_seconds histogram",
            'pin_http_request_duration_seconds_bucket{le="0.1",route="/x"} 1.0',
            "identity_expire_sessions_backlog 0.0",
        ]
    )
    assert exported_metric_names(exposition) >= {
        "pin_consumer_dead_lettered_total",
        "pin_http_request_duration_seconds_bucket",
        "pin_http_request_duration_seconds_count",
        "identity_expire_sessions_backlog",
    }

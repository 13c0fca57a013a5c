"""deploy/compose.yaml (SPEC §9): PostgreSQL, Kafka in KRaft mode, `migrate` once, the API
twice and every worker role, each waiting for the migration and checked for health."""

from __future__ import annotations

import re
from typing import Any

import yaml

from pin_sessions.cli.jobs import JOB_STOP_GRACE_SECONDS
from tests.deploy.roles import API, worker_roles
from tests.support.promql import PROJECT_ROOT

COMPOSE_FILE = PROJECT_ROOT / "deploy" / "compose.yaml"


def services() -> dict[str, dict[str, Any]]:
    document = yaml.safe_load(COMPOSE_FILE.read_text(encoding="utf-8"))
    shipped: dict[str, dict[str, Any]] = document["services"]
    return shipped


def pin_services() -> dict[str, dict[str, Any]]:
    """The services that run the project's image."""
    return {name: s for name, s in services().items() if s.get("image") == "pin-sessions:local"}


def _seconds(duration: str) -> int:
    match = re.fullmatch(r"(\d+)s", duration)
    assert match, duration
    return int(match.group(1))


def test_every_role_runs_with_its_command() -> None:
    shipped = pin_services()
    commands = {name: service["command"] for name, service in shipped.items()}

    assert commands.pop("migrate") == ["migrate"]
    assert commands.pop(API) == ["serve", "--host", "0.0.0.0", "--port", "8000"]
    assert commands == worker_roles()
    assert shipped[API]["deploy"]["replicas"] == 2


def test_the_image_is_built_from_the_project_dockerfile() -> None:
    for name, service in pin_services().items():
        context = (COMPOSE_FILE.parent / service["build"]["context"]).resolve()
        assert context == PROJECT_ROOT, name
        assert (context / service["build"]["dockerfile"]).is_file(), name


def test_migrate_runs_once_after_postgres_and_every_role_after_it() -> None:
    shipped = pin_services()
    migrate = shipped.pop("migrate")

    assert migrate["restart"] == "no"
    assert migrate["depends_on"] == {"postgres": {"condition": "service_healthy"}}
    for name, service in shipped.items():
        after = service["depends_on"]
        assert after["migrate"] == {"condition": "service_completed_successfully"}, name
        assert after["kafka"] == {"condition": "service_healthy"}, name


def test_kafka_runs_in_kraft_mode() -> None:
    kafka = services()["kafka"]["environment"]

    assert set(kafka["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}
    assert kafka["KAFKA_CONTROLLER_QUORUM_VOTERS"].startswith("1@kafka:")
    assert not any("zookeeper" in name.lower() for name in services())
    assert not any("ZOOKEEPER" in key for key in kafka)
    assert services()["postgres"]["image"].startswith("postgres:")


def test_every_long_running_service_has_a_healthcheck() -> None:
    for name, service in services().items():
        if name == "migrate":
            continue
        assert service["healthcheck"]["test"], name
    port = pin_services()["relay"]["environment"]["PIN_METRICS_PORT"]
    for role in worker_roles():
        probe = " ".join(pin_services()[role]["healthcheck"]["test"])
        assert f"127.0.0.1:{port}/metrics" in probe, role
    assert "/readyz" in " ".join(pin_services()[API]["healthcheck"]["test"])


def test_the_api_serves_its_metrics_on_the_metrics_port_inside_the_network_only() -> None:
    """SPEC §11: in prod the API port has no /metrics; the metrics port is never published."""
    api = pin_services()[API]
    assert api["environment"]["PIN_ENV"] == "prod"
    metrics_port = api["environment"]["PIN_METRICS_PORT"]
    assert metrics_port != "8000"
    assert all(metrics_port not in str(published) for published in api["ports"])


def test_jobs_are_given_the_time_a_graceful_stop_takes() -> None:
    for role in worker_roles():
        if role.startswith("job-"):
            grace = _seconds(pin_services()[role]["stop_grace_period"])
            assert grace > JOB_STOP_GRACE_SECONDS, role


def test_every_role_runs_in_production_against_postgres_and_kafka() -> None:
    for name, service in pin_services().items():
        environment = service["environment"]
        assert environment["PIN_ENV"] == "prod", name
        assert "PIN_DEV_CODES" not in environment, name
        assert "@postgres:5432/" in environment["PIN_DATABASE_URL"], name
        assert environment["PIN_KAFKA_BOOTSTRAP_SERVERS"] == "kafka:9092", name
        # One broker: the default three replicas could not be placed.
        assert environment["PIN_KAFKA__REPLICATION_FACTOR"] == "1", name
        # The secret comes from the operator's environment, never a default in the file.
        assert re.fullmatch(r"\$\{PIN_SECRET_KEY:\?[^}]+\}", environment["PIN_SECRET_KEY"]), name


def test_only_the_api_is_given_the_optional_read_replica() -> None:
    """SPEC §11: PIN_DATABASE__READ_URL from the operator's environment, empty (the primary)
    when unset; no other role reads a replica."""
    shipped = pin_services()
    api = shipped.pop(API)["environment"]
    assert api["PIN_DATABASE__READ_URL"] == "${PIN_DATABASE__READ_URL:-}"
    for name, service in shipped.items():
        assert "PIN_DATABASE__READ_URL" not in service["environment"], name

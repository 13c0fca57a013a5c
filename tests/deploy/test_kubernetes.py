"""deploy/kubernetes (SPEC §9), offline: every object valid against its schema (Kubernetes'
own through kubernetes-validate; the Prometheus Operator's resources against the CRD fields
they use), one Deployment per role with its probes and resources, and the monitoring
objects wired to the same names the alerts read."""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml

from pin_sessions.bootstrap.delivery import CONSUMERS, PUBLISHED_TOPICS
from pin_sessions.cli.jobs import JOB_STOP_GRACE_SECONDS
from pin_sessions.cli.messaging import STOP_GRACE_SECONDS
from tests.deploy.roles import API, worker_roles
from tests.deploy.test_dockerfile import parse_dockerfile
from tests.support.promql import PROJECT_ROOT, alert_rules, rules_files
from tests.support.runtime import unconnected_runtime

KUBERNETES_DIR = PROJECT_ROOT / "deploy" / "kubernetes"
KUBERNETES_VERSION = "1.30"
IMAGE = "pin-sessions"
METRICS_PORT = 9100

DURATION = {
    "type": "string",
    "pattern": r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?"
    r"(([0-9]+)ms)?)$",
}
STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
METADATA = {
    "type": "object",
    "required": ["name"],
    "properties": {"name": {"type": "string"}, "labels": STRING_MAP},
}
# The fields of monitoring.coreos.com/v1 these manifests use, as the operator's CRDs type them.
SERVICE_MONITOR = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "ServiceMonitor"},
        "metadata": METADATA,
        "spec": {
            "type": "object",
            "required": ["selector", "endpoints"],
            "additionalProperties": False,
            "properties": {
                "selector": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {"matchLabels": STRING_MAP},
                },
                "endpoints": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {
                            "port": {"type": "string"},
                            "path": {"type": "string", "pattern": "^/"},
                            "interval": DURATION,
                            "scrapeTimeout": DURATION,
                        },
                    },
                },
            },
        },
    },
}
RULE = {
    "type": "object",
    "required": ["expr"],
    "additionalProperties": False,
    "oneOf": [{"required": ["alert"]}, {"required": ["record"]}],
    "properties": {
        "alert": {"type": "string"},
        "record": {"type": "string"},
        "expr": {"type": ["string", "integer"]},
        "for": DURATION,
        "labels": STRING_MAP,
        "annotations": STRING_MAP,
    },
}
PROMETHEUS_RULE = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "PrometheusRule"},
        "metadata": METADATA,
        "spec": {
            "type": "object",
            "required": ["groups"],
            "additionalProperties": False,
            "properties": {
                "groups": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["name", "rules"],
                        "additionalProperties": False,
                        "properties": {
                            "name": {"type": "string", "minLength": 1},
                            "interval": DURATION,
                            "rules": {"type": "array", "items": RULE},
                        },
                    },
                }
            },
        },
    },
}
# The fields of Strimzi's kafka.strimzi.io/v1beta2 KafkaUser these manifests use.
KAFKA_ACL = {
    "type": "object",
    "required": ["resource", "operations"],
    "additionalProperties": False,
    "properties": {
        "resource": {
            "type": "object",
            "required": ["type", "name", "patternType"],
            "additionalProperties": False,
            "properties": {
                "type": {"enum": ["topic", "group", "cluster", "transactionalId"]},
                "name": {"type": "string", "minLength": 1},
                "patternType": {"enum": ["literal", "prefix"]},
            },
        },
        "operations": {
            "type": "array",
            "minItems": 1,
            "items": {
                "enum": [
                    "Read",
                    "Write",
                    "Create",
                    "Delete",
                    "Alter",
                    "Describe",
                    "ClusterAction",
                    "AlterConfigs",
                    "DescribeConfigs",
                    "IdempotentWrite",
                    "All",
                ]
            },
        },
        "host": {"type": "string"},
    },
}
KAFKA_USER = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": "kafka.strimzi.io/v1beta2"},
        "kind": {"const": "KafkaUser"},
        "metadata": {
            "type": "object",
            "required": ["name", "labels"],
            "properties": {
                "name": {"type": "string"},
                # Which Kafka resource's User Operator makes the user.
                "labels": {**STRING_MAP, "required": ["strimzi.io/cluster"]},
            },
        },
        "spec": {
            "type": "object",
            "required": ["authentication", "authorization"],
            "additionalProperties": False,
            "properties": {
                "authentication": {
                    "type": "object",
                    "required": ["type"],
                    "additionalProperties": False,
                    "properties": {"type": {"enum": ["scram-sha-512", "tls", "tls-external"]}},
                },
                "authorization": {
                    "type": "object",
                    "required": ["type", "acls"],
                    "additionalProperties": False,
                    "properties": {
                        "type": {"const": "simple"},
                        "acls": {"type": "array", "items": KAFKA_ACL},
                    },
                },
            },
        },
    },
}
# The fields of CloudNativePG's postgresql.cnpg.io/v1 Cluster these manifests use.
CLUSTER = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": "postgresql.cnpg.io/v1"},
        "kind": {"const": "Cluster"},
        "metadata": METADATA,
        "spec": {
            "type": "object",
            "required": ["instances", "postgresql", "bootstrap", "storage"],
            "additionalProperties": False,
            "properties": {
                "instances": {"type": "integer", "minimum": 1},
                "imageName": {"type": "string"},
                "primaryUpdateStrategy": {"enum": ["unsupervised", "supervised"]},
                "primaryUpdateMethod": {"enum": ["switchover", "restart"]},
                "failoverDelay": {"type": "integer", "minimum": 0},
                "postgresql": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "synchronous": {
                            "type": "object",
                            "required": ["method", "number"],
                            "additionalProperties": False,
                            "properties": {
                                "method": {"enum": ["any", "first"]},
                                "number": {"type": "integer", "minimum": 1},
                                "dataDurability": {"enum": ["required", "preferred"]},
                            },
                        },
                        "parameters": STRING_MAP,
                    },
                },
                "bootstrap": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "initdb": {
                            "type": "object",
                            "additionalProperties": False,
                            "properties": {
                                "database": {"type": "string"},
                                "owner": {"type": "string"},
                            },
                        }
                    },
                },
                "storage": {
                    "type": "object",
                    "required": ["size"],
                    "additionalProperties": False,
                    "properties": {"size": {"type": "string"}, "storageClass": {"type": "string"}},
                },
                "resources": {"type": "object"},
                "affinity": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "enablePodAntiAffinity": {"type": "boolean"},
                        "podAntiAffinityType": {"enum": ["preferred", "required"]},
                        "topologyKey": {"type": "string"},
                    },
                },
                "monitoring": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {"enablePodMonitor": {"type": "boolean"}},
                },
            },
        },
    },
}
CUSTOM_SCHEMAS = {
    "Cluster": CLUSTER,
    "ServiceMonitor": SERVICE_MONITOR,
    "PrometheusRule": PROMETHEUS_RULE,
    "KafkaUser": KAFKA_USER,
}


def kustomization() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(
        (KUBERNETES_DIR / "kustomization.yaml").read_text(encoding="utf-8")
    )
    return document


def objects() -> list[dict[str, Any]]:
    """Every object the kustomization lists, with its `images` override applied."""
    images = {image["name"]: image for image in kustomization()["images"]}
    loaded = []
    for resource in kustomization()["resources"]:
        text = (KUBERNETES_DIR / resource).read_text(encoding="utf-8")
        loaded += [item for item in yaml.safe_load_all(text) if item]
    for item in loaded:
        for container in _containers(item):
            image = images[container["image"]]
            container["image"] = f"{image['newName']}:{image['newTag']}"
    return loaded


def _containers(item: dict[str, Any]) -> list[dict[str, Any]]:
    if item["kind"] not in {"Deployment", "Job"}:
        return []
    containers: list[dict[str, Any]] = item["spec"]["template"]["spec"]["containers"]
    return containers


def of_kind(kind: str) -> dict[str, dict[str, Any]]:
    return {item["metadata"]["name"]: item for item in objects() if item["kind"] == kind}


def test_the_kustomization_lists_every_manifest_and_uses_only_plain_features() -> None:
    # kustomize itself is not on every machine that runs these tests; what it would do
    # with this kustomization (list files, set the image) is done by `objects()` above.
    listed = kustomization()["resources"]
    manifests = {path.name for path in KUBERNETES_DIR.glob("*.yaml")} - {"kustomization.yaml"}

    assert sorted(listed) == sorted(manifests) and len(set(listed)) == len(listed)
    assert set(kustomization()) == {"apiVersion", "kind", "resources", "images"}
    assert [image["name"] for image in kustomization()["images"]] == [IMAGE]


def test_every_object_is_valid_against_its_schema() -> None:
    kinds: Counter[str] = Counter()
    for item in objects():
        kinds[item["kind"]] += 1
        custom = CUSTOM_SCHEMAS.get(item["kind"])
        if custom is not None:
            jsonschema.validate(item, custom)
        else:
            kubernetes_validate.validate(item, KUBERNETES_VERSION, strict=True)

    assert kinds == {
        "ConfigMap": 1,
        "Job": 1,
        "Deployment": 1 + len(worker_roles()),
        "Service": 1 + len(worker_roles()),
        "HorizontalPodAutoscaler": 1,
        # The API, the relay and each consumer run two replicas or more.
        "PodDisruptionBudget": 2 + len(CONSUMERS),
        "ServiceMonitor": 1,
        "PrometheusRule": 1,
        # The PostgreSQL of CloudNativePG, a primary and its standbys.
        "Cluster": 1,
        # The relay and each consumer reach Kafka as a user of their own.
        "KafkaUser": 1 + len(CONSUMERS),
    }


def test_the_schemas_catch_a_misspelt_field() -> None:
    deployment = next(item for item in objects() if item["kind"] == "Deployment")
    deployment["spec"]["template"]["spec"]["containers"][0]["livenesProbe"] = {}
    monitor = next(iter(of_kind("ServiceMonitor").values()))
    monitor["spec"]["endpoints"][0]["intervall"] = "30s"

    for broken, check in (
        (deployment, lambda: kubernetes_validate.validate(deployment, KUBERNETES_VERSION, True)),
        (monitor, lambda: jsonschema.validate(monitor, SERVICE_MONITOR)),
    ):
        try:
            check()
        except jsonschema.ValidationError:
            continue
        raise AssertionError(f"{broken['kind']} with a misspelt field passed")


def test_one_deployment_per_role_runs_its_command() -> None:
    deployments = of_kind("Deployment")
    commands = {
        name.removeprefix("pin-sessions-"): _containers(item)[0]["args"]
        for name, item in deployments.items()
    }

    assert commands.pop(API) == ["serve", "--host", "0.0.0.0", "--port", "8000"]
    assert commands == worker_roles()
    assert _containers(of_kind("Job")["pin-sessions-migrate"])[0]["args"] == ["migrate"]


def test_every_pod_runs_unprivileged_with_resources_and_the_shipped_image() -> None:
    _, stages = parse_dockerfile()
    image_uid = int(stages[-1].all("USER")[-1].split(":")[0])
    for item in [*of_kind("Deployment").values(), *of_kind("Job").values()]:
        pod = item["spec"]["template"]["spec"]
        name = item["metadata"]["name"]
        assert pod["securityContext"]["runAsNonRoot"] is True, name
        assert pod["securityContext"]["runAsUser"] == image_uid, name
        for container in pod["containers"]:
            assert container["image"].startswith(f"{IMAGE}:"), name
            assert set(container["resources"]["requests"]) == {"cpu", "memory"}, name
            assert "memory" in container["resources"]["limits"], name
            assert container["securityContext"]["readOnlyRootFilesystem"] is True, name
            mounts = {mount["mountPath"] for mount in container["volumeMounts"]}
            assert "/tmp" in mounts, name  # PIN_DATA_DIR and temporary files


def test_the_api_is_probed_drained_scaled_and_kept_available() -> None:
    api = of_kind("Deployment")["pin-sessions-api"]
    pod = api["spec"]["template"]["spec"]
    container = pod["containers"][0]

    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    pre_stop = container["lifecycle"]["preStop"]["exec"]["command"]
    assert pre_stop[0] == "sleep"
    assert int(pre_stop[1]) < pod["terminationGracePeriodSeconds"]
    assert "replicas" not in api["spec"], "the autoscaler owns the replica count"
    assert api["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0

    hpa = of_kind("HorizontalPodAutoscaler")["pin-sessions-api"]
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "pin-sessions-api",
    }
    assert hpa["spec"]["minReplicas"] >= 2
    budgets = of_kind("PodDisruptionBudget")
    assert budgets["pin-sessions-api"]["spec"]["minAvailable"] == 1
    for name, budget in budgets.items():
        selected = of_kind("Deployment")[name]["spec"]["template"]["metadata"]["labels"]
        assert budget["spec"]["selector"]["matchLabels"].items() <= selected.items(), name
        assert of_kind("Deployment")[name]["spec"].get("replicas", 2) >= 2, name


def test_every_worker_is_probed_on_its_metrics_port_and_stops_in_time() -> None:
    config = of_kind("ConfigMap")["pin-sessions"]["data"]
    assert int(config["PIN_METRICS_PORT"]) == METRICS_PORT
    assert config["PIN_ENV"] == "prod" and "PIN_DEV_CODES" not in config
    for role in worker_roles():
        pod = of_kind("Deployment")[f"pin-sessions-{role}"]["spec"]["template"]["spec"]
        container = pod["containers"][0]
        ports = {port["name"]: port["containerPort"] for port in container["ports"]}
        assert ports == {"metrics": METRICS_PORT}, role
        assert container["livenessProbe"]["httpGet"] == {"path": "/metrics", "port": "metrics"}
        grace = JOB_STOP_GRACE_SECONDS if role.startswith("job-") else STOP_GRACE_SECONDS
        assert pod["terminationGracePeriodSeconds"] > grace, role


def test_the_api_is_scraped_on_its_metrics_port_not_where_clients_reach_it() -> None:
    """SPEC §11: in prod /metrics is only on PIN_METRICS_PORT, never on the API port."""
    container = of_kind("Deployment")["pin-sessions-api"]["spec"]["template"]["spec"]
    ports = {port["name"]: port["containerPort"] for port in container["containers"][0]["ports"]}
    assert ports == {"http": 8000, "metrics": METRICS_PORT}
    service = {
        port["name"]: port for port in of_kind("Service")["pin-sessions-api"]["spec"]["ports"]
    }
    assert service["metrics"]["targetPort"] == "metrics"
    assert service["http"]["targetPort"] == "http"


def test_the_service_monitor_scrapes_every_role_under_the_job_names_the_alerts_use() -> None:
    services = of_kind("Service")
    monitor = of_kind("ServiceMonitor")["pin-sessions"]["spec"]
    [endpoint] = monitor["endpoints"]
    deployments = of_kind("Deployment")

    assert set(services) == set(deployments)
    for name, service in services.items():
        assert monitor["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
        pod = deployments[name]["spec"]["template"]
        assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items(), name
        container_ports = {port["name"] for port in pod["spec"]["containers"][0]["ports"]}
        metrics = [port for port in service["spec"]["ports"] if port["name"] == endpoint["port"]]
        assert metrics and metrics[0]["targetPort"] in container_ports, name
    # A target's `job` label is its Service's name: every "down" alert must name one.
    scraped = {f'job="{name}"' for name in services}
    for rule in alert_rules():
        if "up{" in rule["expr"]:
            assert any(job in rule["expr"] for job in scraped), rule["alert"]


def test_the_prometheus_rule_is_generated_from_the_rules_files() -> None:
    generated = subprocess.run(
        [sys.executable, str(KUBERNETES_DIR / "generate_prometheus_rule.py")],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    committed = (KUBERNETES_DIR / "prometheus-rule.yaml").read_text(encoding="utf-8")

    assert committed == generated, "run `make deploy/kubernetes/prometheus-rule.yaml`"
    groups = [
        group
        for path in rules_files()
        for group in yaml.safe_load(path.read_text(encoding="utf-8"))["groups"]
    ]
    assert of_kind("PrometheusRule")["pin-sessions"]["spec"]["groups"] == groups


def test_each_kafka_role_is_a_user_of_its_own_allowed_only_its_topics() -> None:
    """Seed 004, SPEC §11: the relay writes the contexts' topics and nothing else; each
    consumer reads its one topic under its own group; each Deployment signs in as its user."""
    users = {name: item["spec"] for name, item in of_kind("KafkaUser").items()}
    deployments = of_kind("Deployment")

    def acls(user: str) -> set[tuple[str, str, str]]:
        return {
            (acl["resource"]["type"], acl["resource"]["name"], operation)
            for acl in users[user]["authorization"]["acls"]
            for operation in acl["operations"]
            if acl["resource"]["patternType"] == "literal"
        }

    assert {user["authentication"]["type"] for user in users.values()} == {"scram-sha-512"}
    assert acls("pin-sessions-relay") == {
        ("topic", topic, operation)
        for topic in PUBLISHED_TOPICS
        for operation in ("Create", "Describe", "Write")
    }
    for name, build in CONSUMERS.items():
        topic = build(unconnected_runtime()).topic
        assert acls(f"pin-sessions-consume-{name}") == {
            ("topic", topic, "Describe"),
            ("topic", topic, "Read"),
            ("group", name, "Read"),
        }
    assert set(users) == {f"pin-sessions-{role}" for role in ("relay", *kafka_consumers())}
    for user in users:
        env = {
            item["name"]: item
            for item in _containers(deployments[user])[0]["env"]
            if item["name"].startswith("PIN_KAFKA__")
        }
        assert env["PIN_KAFKA__SECURITY_PROTOCOL"]["value"] == "sasl_ssl", user
        assert env["PIN_KAFKA__SASL_MECHANISM"]["value"] == "SCRAM-SHA-512", user
        assert env["PIN_KAFKA__SASL_USERNAME"]["value"] == user
        secret = env["PIN_KAFKA__SASL_PASSWORD"]["valueFrom"]["secretKeyRef"]
        assert secret == {"name": user, "key": "password"}
        mounts = {m["mountPath"] for m in _containers(deployments[user])[0]["volumeMounts"]}
        assert str(Path(env["PIN_KAFKA__SSL_CA_LOCATION"]["value"]).parent) in mounts, user
    # Only the roles that reach Kafka carry its credentials.
    for name, item in deployments.items():
        if name not in users:
            names = {e["name"] for e in _containers(item)[0].get("env", [])}
            assert not {n for n in names if n.startswith("PIN_KAFKA__")}, name


def kafka_consumers() -> list[str]:
    return [f"consume-{name}" for name in CONSUMERS]


def test_the_operators_kafka_acls_grant_what_the_manifest_grants() -> None:
    """docs/operations.md's `kafka-acls` commands, for a Kafka without Strimzi, stay true."""
    text = (PROJECT_ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    block = text[text.index("KAFKA=kafka-1.internal:9093") :]
    block = block[: block.index("```")]
    consumers = set(re.findall(r"^(pin-sessions-consume-\S+) (\S+) (\S+)$", block, re.M))
    relay = re.search(r"for topic in \\\n(.*?); do", block, re.S)

    assert consumers == {
        (f"pin-sessions-consume-{name}", build(unconnected_runtime()).topic, name)
        for name, build in CONSUMERS.items()
    }
    assert relay is not None
    assert relay.group(1).replace("\\", " ").split() == list(PUBLISHED_TOPICS)


def test_the_database_is_a_cloudnativepg_cluster_with_a_synchronous_standby() -> None:
    """A failover loses nothing acknowledged only with a standby that has every commit."""
    [cluster] = of_kind("Cluster").values()
    spec = cluster["spec"]
    assert spec["instances"] >= 2
    synchronous = spec["postgresql"]["synchronous"]
    assert synchronous["number"] >= 1 and synchronous["number"] < spec["instances"]
    # Writes wait rather than go on unprotected while no standby answers.
    assert synchronous["dataDurability"] == "required"
    assert spec["bootstrap"]["initdb"] == {"database": "pin", "owner": "pin"}


def _env(item: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {entry["name"]: entry for entry in _containers(item)[0].get("env", [])}


def test_every_workload_reaches_the_primary_through_the_clusters_rw_service() -> None:
    """CloudNativePG's app Secret holds a `uri` naming `<cluster>-rw`, the primary wherever
    it runs; no workload takes the database from anywhere else."""
    [name] = of_kind("Cluster")
    uri = {"secretKeyRef": {"name": f"{name}-app", "key": "uri"}}
    workloads = [*of_kind("Deployment").items(), *of_kind("Job").items()]
    assert len(workloads) == 2 + len(worker_roles())
    for workload, item in workloads:
        assert _env(item)["PIN_DATABASE_URL"] == {"name": "PIN_DATABASE_URL", "valueFrom": uri}, (
            workload
        )


def test_only_the_api_reads_the_standbys_through_the_clusters_ro_service() -> None:
    """Reads that tolerate lag go to the cluster's standbys; no other role reads a replica."""
    [name] = of_kind("Cluster")
    for workload, item in [*of_kind("Deployment").items(), *of_kind("Job").items()]:
        env = _env(item)
        assert ("PIN_DATABASE__READ_URL" in env) is (workload == "pin-sessions-api"), workload
    env = _env(of_kind("Deployment")["pin-sessions-api"])
    read_url = env["PIN_DATABASE__READ_URL"]["value"]
    assert read_url == (
        f"postgresql://$(DATABASE_USERNAME):$(DATABASE_PASSWORD)@{name}-ro:5432/pin"
    )
    # Kubernetes expands $(NAME) only from variables defined before it.
    names = list(env)
    assert names.index("DATABASE_USERNAME") < names.index("PIN_DATABASE__READ_URL")
    assert names.index("DATABASE_PASSWORD") < names.index("PIN_DATABASE__READ_URL")
    for variable, key in (("DATABASE_USERNAME", "username"), ("DATABASE_PASSWORD", "password")):
        assert env[variable]["valueFrom"] == {"secretKeyRef": {"name": f"{name}-app", "key": key}}

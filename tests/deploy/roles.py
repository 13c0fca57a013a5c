"""The roles a deployment runs, each with the command line that starts it (SPEC §2):
compose services and Kubernetes Deployments are named after them."""

from __future__ import annotations

from pin_sessions.bootstrap.delivery import CONSUMERS
from pin_sessions.bootstrap.jobs import JOB_WORKERS

API = "api"


def worker_roles() -> dict[str, list[str]]:
    """Every long-running role besides the API: each job, the relay, each consumer."""
    return (
        {f"job-{name}": ["job", name] for name in JOB_WORKERS}
        | {"relay": ["relay"]}
        | {f"consume-{name}": ["consume", name] for name in CONSUMERS}
    )

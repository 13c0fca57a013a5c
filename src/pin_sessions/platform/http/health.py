"""Liveness, readiness and the Prometheus endpoint.

``/readyz`` asks the primary alone, and names the host it reached (``database.host``): of a
multi-host ``PIN_DATABASE_URL``, the one that takes writes now, so an operator sees a
failover land. With a read replica (``PIN_DATABASE__READ_URL``) it also
names the replica's state and lag, but never fails because of it: the primary serves the
replica's reads meanwhile (SPEC §11), and failing readiness would take every API process
out of rotation for the loss of a component they can do without.

``/metrics`` is a router of its own: outside prod it is served beside the API; in prod only
on the metrics port, never where the API's clients reach (SPEC §11).
"""

from __future__ import annotations

import asyncio

import structlog
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from pin_sessions.platform.database import server_address
from pin_sessions.platform.errors import ServiceUnavailable
from pin_sessions.platform.http.dependencies import DatabaseDep
from pin_sessions.platform.http.openapi import problems
from pin_sessions.platform.http.problems import problem_response
from pin_sessions.platform.http.wiring import request_services
from pin_sessions.platform.metrics import CONTENT_TYPE_LATEST, render
from pin_sessions.platform.migrations import pending_migrations

log = structlog.get_logger(__name__)

READINESS_TIMEOUT_SECONDS = 2.0


class Status(BaseModel):
    """The process's state."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"status": "ok"}]})

    status: str


class ReplicaStatus(BaseModel):
    """The read replica's state, when one is set."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        json_schema_extra={"examples": [{"state": "ok", "lagSeconds": 0.4}]},
    )

    state: str = Field(description="ok (serves reads), lagging, down, not_replica or unknown")
    lag_seconds: float | None = Field(description="How far it is behind the primary, if known")


class DatabaseStatus(BaseModel):
    """The database server this process writes to."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"host": "10.0.3.17:5432"}]})

    host: str = Field(description="host:port of the primary this process uses")


class ReadyStatus(Status):
    """Ready: the database answers and its migrations are current."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        json_schema_extra={
            "examples": [{"status": "ready", "database": {"host": "10.0.3.17:5432"}}]
        },
    )

    database: DatabaseStatus

    read_replica: ReplicaStatus | None = Field(
        default=None, description="Only with PIN_DATABASE__READ_URL; never makes /readyz fail"
    )


router = APIRouter(tags=["operations"])


@router.get("/healthz", operation_id="checkHealth", summary="The process is alive")
async def healthz() -> Status:
    """200 while the process runs (a liveness probe); it asks the database nothing."""
    return Status(status="ok")


@router.get(
    "/readyz",
    operation_id="checkReadiness",
    summary="The database answers and its migrations are current",
    response_model=ReadyStatus,
    responses=problems(503),
)
async def readyz(request: Request, database: DatabaseDep) -> Response:
    """200 when the process should get traffic (a readiness probe); 503 naming the cause
    while the database does not answer, migrations are pending, or the process stops."""
    wired = request_services(request)
    replica = wired.http.reads.replica_status()
    named = {} if replica is None else {"readReplica": replica}
    if wired.readiness.stopping:
        return problem_response(
            request, ServiceUnavailable, detail="the process is stopping", extra=named
        )
    try:
        async with asyncio.timeout(READINESS_TIMEOUT_SECONDS):
            async with database.connection() as conn:
                pending = await pending_migrations(conn)
                host = server_address(conn)
    except (Exception, TimeoutError) as exc:  # any failure means "not ready", never a 500
        log.warning("readiness check failed", errorType=type(exc).__name__)
        return problem_response(
            request, ServiceUnavailable, detail="database unavailable", extra=named
        )
    if pending:
        return problem_response(
            request,
            ServiceUnavailable,
            detail="database migrations are not current",
            extra={"pendingMigrations": [migration.version for migration in pending], **named},
        )
    return JSONResponse({"status": "ready", "database": {"host": host}, **named})


metrics_router = APIRouter(tags=["operations"])


@metrics_router.get(
    "/metrics",
    operation_id="getMetrics",
    summary="Prometheus metrics",
    description="The process's metrics in Prometheus' text format, for scraping.",
    response_class=Response,
    responses={
        200: {
            "content": {
                CONTENT_TYPE_LATEST: {
                    "schema": {"type": "string"},
                    "example": "# TYPE pin_outbox_pending gauge\npin_outbox_pending 0.0\n",
                }
            }
        }
    },
)
async def metrics(request: Request) -> Response:
    registry = request_services(request).metrics_view
    return Response(render(registry), media_type=CONTENT_TYPE_LATEST)

"""What the OpenAPI document says about errors and hand-read parameters, declared once.

Every error this API sends is problem+json (``problems.py``), so routes declare theirs as
``responses=problems(400, 401, 422, 503)``: each status refers to the one ``Problem``
schema under ``application/problem+json``, with the header that status carries
(``WWW-Authenticate`` on 401, ``Retry-After`` on 429 and, when turned away unstarted, on
503). Every route but the probes may answer 503 (``admission``): the document says so for
all. Declaring 422 this way also stops FastAPI from documenting its own
``HTTPValidationError``, which this API never sends.

Some parameters are read by hand, so a bad value is our 400 with a stable code rather than
FastAPI's 422 (``X-Anonymous-Id``, ``limit``, dates); routes describe them with
``openapi_extra=parameters(...)``.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from pin_sessions.platform.http.admission import UNBOUNDED_PATHS
from pin_sessions.platform.http.problems import PROBLEM_CONTENT_TYPE

PROBLEM_SCHEMA_NAME = "Problem"
_FASTAPI_VALIDATION_ERROR = "HTTPValidationError"

# RFC 9457 members plus ours; any other member a problem carries is allowed.
PROBLEM_SCHEMA: dict[str, Any] = {
    "title": PROBLEM_SCHEMA_NAME,
    "description": "RFC 9457 problem details with a stable `code`.",
    "type": "object",
    "required": ["type", "title", "status", "detail", "instance", "code"],
    "properties": {
        "type": {
            "type": "string",
            "format": "uri",
            "description": "The page that explains the code: `<public URL>/problems/<code>`",
        },
        "title": {"type": "string"},
        "status": {"type": "integer", "minimum": 400, "maximum": 599},
        "detail": {"type": "string"},
        "instance": {"type": "string", "description": "The request's path"},
        "code": {"type": "string", "description": "Stable, e.g. `USER_ACTIVITY_LIMIT_INVALID`"},
        "requestId": {"type": "string", "description": "Also in `X-Request-Id` and the log"},
        "errors": {
            "type": "array",
            "description": (
                "What failed validation (422): each field, and in words what it expects; the "
                "input itself is never echoed"
            ),
            "items": {
                "type": "object",
                "required": ["field", "message"],
                "properties": {
                    "field": {"type": "string", "description": "e.g. `phoneNumber`"},
                    "message": {"type": "string", "description": "e.g. `is required`"},
                },
            },
        },
    },
    "additionalProperties": True,
}

_DESCRIPTIONS = {
    400: "Malformed JSON, or a header or parameter this API refuses (see `code`)",
    401: "No valid credentials",
    403: "Authenticated, but not allowed",
    404: "Not found",
    409: "Conflict with the resource's state",
    410: "Gone",
    413: "The request body is too large",
    422: "The body or a parameter failed validation",
    429: "Too many requests",
    503: (
        "The database did not answer in time, or the process serves its limit of requests "
        "at once (then with `Retry-After`); retry"
    ),
}

_HEADERS: dict[int, dict[str, Any]] = {
    401: {
        "WWW-Authenticate": {
            "description": "`Bearer`",
            "required": True,
            "schema": {"type": "string"},
        }
    },
    429: {
        "Retry-After": {
            "description": "Seconds to wait before asking again",
            "required": True,
            "schema": {"type": "integer", "minimum": 0},
        }
    },
    503: {
        "Retry-After": {
            "description": "Seconds to wait before asking again, when the request was turned "
            "away unstarted (the process at its limit of requests at once)",
            "required": False,
            "schema": {"type": "integer", "minimum": 0},
        }
    },
}


def problems(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """``responses=`` entries: each status answered with the shared problem+json body."""
    responses: dict[int | str, dict[str, Any]] = {}
    for status in statuses:
        response: dict[str, Any] = {
            "description": _DESCRIPTIONS[status],
            "content": {
                PROBLEM_CONTENT_TYPE: {
                    "schema": {"$ref": f"#/components/schemas/{PROBLEM_SCHEMA_NAME}"}
                }
            },
        }
        if status in _HEADERS:
            response["headers"] = _HEADERS[status]
        responses[status] = response
    return responses


def parameters(*declared: dict[str, Any]) -> dict[str, Any]:
    """``openapi_extra=`` for parameters a route reads by hand (FastAPI adds them to its own)."""
    return {"parameters": list(declared)}


def query_parameter(name: str, schema: dict[str, Any], description: str) -> dict[str, Any]:
    """An optional query parameter read by hand."""
    return {
        "name": name,
        "in": "query",
        "required": False,
        "description": description,
        "schema": schema,
    }


def install_problem_schema(app: FastAPI) -> None:
    """Make ``app``'s document speak problem+json only.

    Adds the ``Problem`` schema that ``problems()`` refers to, and drops the 422
    ``HTTPValidationError`` FastAPI documents on every route with a parameter unless the
    route declared its own 422: this API never sends that body, and a route that can
    answer 422 at all declares it with ``problems(422)``.
    """
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            _speak_problems(generate())  # FastAPI builds the document once and caches it
        return generate()

    app.openapi = openapi  # type: ignore[method-assign]


def _speak_problems(document: dict[str, Any]) -> None:
    for path, operations in document.get("paths", {}).items():
        for operation in operations.values():
            responses = operation.get("responses", {})
            if _is_fastapi_422(responses.get("422", {})):
                del responses["422"]
            if path not in UNBOUNDED_PATHS:
                # Any route may be turned away unstarted when the process is at its bound
                # (admission.py), the ones that never ask the database included.
                responses.setdefault("503", problems(503)[503])
    schemas = document.setdefault("components", {}).setdefault("schemas", {})
    for name in (_FASTAPI_VALIDATION_ERROR, "ValidationError"):
        schemas.pop(name, None)
    schemas[PROBLEM_SCHEMA_NAME] = PROBLEM_SCHEMA


def _is_fastapi_422(response: dict[str, Any]) -> bool:
    schema = response.get("content", {}).get("application/json", {}).get("schema", {})
    return bool(schema.get("$ref", "").endswith(f"/{_FASTAPI_VALIDATION_ERROR}"))

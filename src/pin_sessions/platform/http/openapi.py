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
from pydantic import ConfigDict

from pin_sessions.platform.auth_errors import SessionNotActive
from pin_sessions.platform.errors import (
    AppError,
    MalformedRequest,
    NotFound,
    PayloadTooLarge,
    ServiceUnavailable,
    ValidationFailed,
)
from pin_sessions.platform.http.admission import UNBOUNDED_PATHS
from pin_sessions.platform.http.headers import DuplicateHeader
from pin_sessions.platform.http.problem_types import problem_type_url
from pin_sessions.platform.http.problems import PROBLEM_CONTENT_TYPE
from pin_sessions.platform.tokens import InvalidToken
from pin_sessions.settings import DEFAULT_PUBLIC_URL

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
    400: "Malformed JSON, or a header or parameter this API refuses",
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

# The codes any route may answer a status with: the shell's own refusals. A route adds its
# own codes by naming its error classes.
_COMMON_CODES: dict[int, tuple[type[AppError], ...]] = {
    400: (MalformedRequest, DuplicateHeader),
    401: (InvalidToken, SessionNotActive),
    404: (NotFound,),
    413: (PayloadTooLarge,),
    422: (ValidationFailed,),
    503: (ServiceUnavailable,),
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


def problems(*answers: int | type[AppError]) -> dict[int | str, dict[str, Any]]:
    """``responses=`` entries, each answered with the shared problem+json body.

    ``answers`` are statuses, which bring the codes every route may answer them with
    (``_COMMON_CODES``), and error classes, whose code joins their status. Each response
    lists its codes, with an example body of each, and links their explanations.
    """
    codes: dict[int, dict[str, type[AppError]]] = {}
    for answer in answers:
        if isinstance(answer, int):
            common = codes.setdefault(answer, {})
            common.update({error.code: error for error in _COMMON_CODES.get(answer, ())})
        else:
            codes.setdefault(answer.status, {})[answer.code] = answer
    return {status: _problem_response(status, codes[status]) for status in sorted(codes)}


def _problem_response(status: int, codes: dict[str, type[AppError]]) -> dict[str, Any]:
    if not codes:
        raise ValueError(f"a {status} problem response needs at least one code")
    listed = ", ".join(
        f"[`{code}`]({problem_type_url(DEFAULT_PUBLIC_URL, code)})" for code in codes
    )
    response: dict[str, Any] = {
        "description": f"{_DESCRIPTIONS[status]}. `code`: {listed}",
        "content": {
            PROBLEM_CONTENT_TYPE: {
                "schema": {"$ref": f"#/components/schemas/{PROBLEM_SCHEMA_NAME}"},
                "examples": {
                    code: _problem_example(status, error) for code, error in codes.items()
                },
            }
        },
    }
    if status in _HEADERS:
        response["headers"] = _HEADERS[status]
    return response


def _problem_example(status: int, error: type[AppError]) -> dict[str, Any]:
    return {
        "summary": error.title,
        "value": {
            "type": problem_type_url(DEFAULT_PUBLIC_URL, error.code),
            "title": error.title,
            "status": status,
            "detail": error.title,
            "instance": "/api/...",
            "code": error.code,
            "requestId": "4f6c2b1e9a8d4e0b8c7d6e5f4a3b2c1d",
        },
    }


def example(value: dict[str, Any]) -> ConfigDict:
    """A body model's ``model_config`` entry: ``value``, as on the wire, shown in the document."""
    return ConfigDict(json_schema_extra={"examples": [value]})


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


API_DESCRIPTION = """\
The sessions service of PIN, a property-investment platform.

* **identity** — sign-in by a one-time code texted to a phone, then an access token (15
  minutes) and a refresh token (30 days, rotated on each use); signed-in devices and
  sign-out; a user's export and erasure of their account.
* **user-activity** — the session of a browser or app (a *device*, known by the
  `anonymousId` the service issues at its first `startSession` and sent back as
  `X-Anonymous-Id`): start, heartbeat, link to the user who signs in, actions and property
  views, history. A session ends after 15 minutes without activity.
* **dev-stats** — session metrics.
* **OAuth** — access tokens for other services (client credentials), their introspection,
  and the public keys every token is signed with.

Times are set by the server's clock alone; bodies are JSON in camelCase, and unknown fields
are refused. Errors are `application/problem+json` with a stable `code`, whose `type` is a
page explaining it (`/problems` lists every code); the OAuth endpoints answer errors in
OAuth's own JSON.
"""

TAGS = [
    {"name": "identity", "description": "Sign-in by SMS code, tokens, signed-in devices"},
    {
        "name": "user-activity",
        "description": "A device's sessions, heartbeats, actions, property views and history",
    },
    {
        "name": "user-activity internal",
        "description": "For other services, with a service's token (`/oauth/token`)",
    },
    {"name": "dev-stats", "description": "Session metrics for holders of `dev-stats.view`"},
    {"name": "oauth", "description": "Service tokens, introspection and the signing keys"},
    {"name": "operations", "description": "Probes and metrics"},
    {"name": "development", "description": "Served only in development, never in production"},
]


def document_info(public_url: str) -> dict[str, Any]:
    """The document's own words: FastAPI's ``description``, ``servers`` and tags."""
    return {
        "description": API_DESCRIPTION,
        "servers": [{"url": public_url, "description": "This service"}],
        "openapi_tags": TAGS,
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
            _optional_body_is_optional(operation)
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


def _optional_body_is_optional(operation: dict[str, Any]) -> None:
    """An optional body is documented as its model, not required: FastAPI writes
    ``anyOf [Model, null]``, which generated clients turn into a call that cannot omit it."""
    body = operation.get("requestBody")
    if body is None:
        return
    for media in body.get("content", {}).values():
        options = media.get("schema", {}).get("anyOf", [])
        models = [option for option in options if option.get("type") != "null"]
        if len(models) == 1 and len(options) == 2:
            media["schema"] = models[0]
            body["required"] = False


def _is_fastapi_422(response: dict[str, Any]) -> bool:
    schema = response.get("content", {}).get("application/json", {}).get("schema", {})
    return bool(schema.get("$ref", "").endswith(f"/{_FASTAPI_VALIDATION_ERROR}"))

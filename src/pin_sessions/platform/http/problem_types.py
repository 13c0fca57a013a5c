"""Problem types that resolve: ``{public URL}/problems/{CODE}`` for every code the service
answers with, and ``/problems`` listing them all.

Each error class carries its ``code``, ``status``, ``title`` (what happened) and ``advice``
(what to do); the catalogue is read from the classes themselves, so a new error is listed as
soon as it exists and a test keeps every code's advice written. A browser gets a page,
anything else JSON. The routes need no credentials and ask the database nothing.
"""

from __future__ import annotations

import base64
import hashlib
import html
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response

from pin_sessions.platform.errors import AppError
from pin_sessions.platform.http.wiring import public_url_of

PROBLEMS_PATH = "/problems"
_STYLE = (
    "body{font:16px/1.5 system-ui,sans-serif;margin:2rem auto;max-width:46rem;padding:0 1rem;"
    "color:#1b1f24}h1{font:600 1.4rem ui-monospace,monospace;overflow-wrap:anywhere}"
    "code{font-family:ui-monospace,monospace}li{margin:.3rem 0}"
)
_STYLE_HASH = base64.b64encode(hashlib.sha256(_STYLE.encode()).digest()).decode()
# The pages are text and links: nothing to load, nothing to run; only their own style.
_PAGE_HEADERS = {
    "Content-Security-Policy": f"default-src 'none'; style-src 'sha256-{_STYLE_HASH}'",
    "Cache-Control": "public, max-age=300",
}


@dataclass(frozen=True)
class ProblemType:
    """One code: the statuses it comes with, what it means and what to do."""

    code: str
    statuses: tuple[int, ...]
    title: str
    advice: str

    def describe(self, base_url: str) -> dict[str, Any]:
        return {
            "type": problem_type_url(base_url, self.code),
            "code": self.code,
            "statuses": list(self.statuses),
            "title": self.title,
            "advice": self.advice,
        }


def problem_type_url(base_url: str, code: str) -> str:
    """The ``type`` of a problem with ``code``: the page that explains it."""
    return f"{base_url.rstrip('/')}{PROBLEMS_PATH}/{code}"


def problem_types() -> dict[str, ProblemType]:
    """Every code of the error classes this process has imported, by code.

    Classes that share a code (a refresh's 401 and a revoke's 404 for a session that is not
    there) make one type with both statuses; its title and advice are those of the class
    that writes its own advice.
    """
    by_code: dict[str, list[type[AppError]]] = {}
    for error in _error_classes():
        by_code.setdefault(error.code, []).append(error)
    return {code: _problem_type(code, classes) for code, classes in sorted(by_code.items())}


def _error_classes() -> list[type[AppError]]:
    found, pending = [AppError], [AppError]
    while pending:
        for subclass in pending.pop().__subclasses__():
            found.append(subclass)
            pending.append(subclass)
    # A context's base class (no code of its own) is never raised; the catalogue is the
    # service's own codes.
    return [
        error
        for error in found
        if error.__module__.startswith("pin_sessions.")
        and (error is AppError or "code" in vars(error))
    ]


def _problem_type(code: str, classes: list[type[AppError]]) -> ProblemType:
    own = [error for error in classes if "advice" in vars(error)] or classes
    return ProblemType(
        code=code,
        statuses=tuple(sorted({error.status for error in classes})),
        title=own[0].title,
        advice=own[0].advice,
    )


router = APIRouter(prefix=PROBLEMS_PATH, include_in_schema=False)


@router.get("")
async def list_problem_types(request: Request) -> Response:
    base = _base_url(request)
    types = problem_types().values()
    if _wants_html(request):
        rows = "".join(
            f'<li><a href="{html.escape(problem_type_url(base, kind.code))}">'
            f"<code>{html.escape(kind.code)}</code></a> — {html.escape(kind.title)}</li>"
            for kind in types
        )
        return _page("Problem types", f"<ul>{rows}</ul>")
    return JSONResponse({"items": [kind.describe(base) for kind in types]}, headers=_PAGE_HEADERS)


@router.get("/{code}")
async def show_problem_type(code: str, request: Request) -> Response:
    kind = problem_types().get(code)
    if kind is None:
        raise ProblemTypeNotFound(f"no problem type has the code {code!r}; see {PROBLEMS_PATH}")
    if _wants_html(request):
        statuses = ", ".join(str(status) for status in kind.statuses)
        body = (
            f"<p><strong>{html.escape(kind.title)}</strong> (HTTP {statuses})</p>"
            f"<h2>What to do</h2><p>{html.escape(kind.advice)}</p>"
            f'<p><a href="{PROBLEMS_PATH}">Every problem type</a></p>'
        )
        return _page(kind.code, body)
    return JSONResponse(kind.describe(_base_url(request)), headers=_PAGE_HEADERS)


class ProblemTypeNotFound(AppError):
    code = "PROBLEM_TYPE_NOT_FOUND"
    status = 404
    title = "No such problem type"
    advice = "The code is not one this service answers with; /problems lists every code."


def _base_url(request: Request) -> str:
    return public_url_of(request.app) or str(request.base_url)


def _wants_html(request: Request) -> bool:
    accept = request.headers.get("accept", "")
    return "text/html" in accept


def _page(title: str, body: str) -> HTMLResponse:
    text = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{html.escape(title)} — PIN Sessions</title><style>{_STYLE}</style></head>"
        f"<body><main><h1>{html.escape(title)}</h1>{body}</main></body></html>"
    )
    return HTMLResponse(text, headers=_PAGE_HEADERS)

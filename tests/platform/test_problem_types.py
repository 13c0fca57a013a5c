"""Problems lead somewhere: a problem's ``type`` is ``{public URL}/problems/{CODE}``, a page
the service serves (HTML for a browser, JSON otherwise) saying what the code means and what
to do; ``/problems`` lists every code; a validation problem names each field and says in
words what it expects."""

from __future__ import annotations

import httpx

from pin_sessions.platform.errors import AppError
from pin_sessions.platform.http.problem_types import problem_types
from pin_sessions.settings import DEFAULT_PUBLIC_URL

SIGN_IN = "/api/identity/sign-in/requests"
ACTIONS = "/api/user-activity/actions"
DEVICE = {"X-Anonymous-Id": "0b7f8c3e-6a52-4c1e-9d1a-5f0c2a7e4b11"}


async def test_a_problems_type_is_the_page_that_explains_its_code(
    http: httpx.AsyncClient,
) -> None:
    refused = await http.get("/api/user-activity/sessions")
    problem = refused.json()
    assert problem["type"] == f"{DEFAULT_PUBLIC_URL}/problems/AUTH_REQUIRED"
    page = await http.get(problem["type"].removeprefix(DEFAULT_PUBLIC_URL))
    assert page.status_code == 200
    assert page.json() == {
        "type": problem["type"],
        "code": "AUTH_REQUIRED",
        "statuses": [401],
        "title": problem["title"],
        "advice": page.json()["advice"],
    }
    assert "X-Anonymous-Id" in page.json()["advice"]


async def test_a_browser_gets_the_page_as_html_without_anything_to_run(
    http: httpx.AsyncClient,
) -> None:
    page = await http.get("/problems/USER_ACTIVITY_SESSION_ALREADY_ENDED", headers=_BROWSER)
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert page.headers["content-security-policy"].startswith("default-src 'none'; style-src")
    assert "<h1>USER_ACTIVITY_SESSION_ALREADY_ENDED</h1>" in page.text
    assert "What to do" in page.text
    assert "<script" not in page.text


async def test_the_list_has_every_code_each_with_its_advice(http: httpx.AsyncClient) -> None:
    listed = (await http.get("/problems")).json()["items"]
    codes = {item["code"] for item in listed}
    assert {
        "USER_ACTIVITY_SESSION_ALREADY_ENDED",
        "IDENTITY_CONFIRMATION_EXPIRED",
        "DEV_STATS_PERIOD_INVALID",
        "VALIDATION_ERROR",
        "INTERNAL_ERROR",
    } <= codes
    assert all(item["advice"] and item["title"] for item in listed)
    html = await http.get("/problems", headers=_BROWSER)
    assert all(f"/problems/{code}" in html.text for code in codes)


def test_every_error_class_with_a_code_has_advice_of_its_own_or_its_codes() -> None:
    """A new error cannot ship without saying what to do about it."""
    types = problem_types()
    pending: list[type[AppError]] = [AppError]
    while pending:
        error = pending.pop()
        pending.extend(error.__subclasses__())
        if "code" in vars(error) and error.__module__.startswith("pin_sessions."):
            kind = types[error.code]
            assert (kind.advice and kind.advice != AppError.advice) or error is AppError, error


async def test_an_unknown_code_is_a_404_problem(http: httpx.AsyncClient) -> None:
    missing = await http.get("/problems/NO_SUCH_CODE")
    assert (missing.status_code, missing.json()["code"]) == (404, "PROBLEM_TYPE_NOT_FOUND")


async def test_a_validation_problem_names_each_field_and_what_it_expects(
    http: httpx.AsyncClient,
) -> None:
    refused = await http.post(SIGN_IN, json={"phoneNumber": "0044 12", "extra": 1})
    assert refused.status_code == 422
    problem = refused.json()
    assert sorted(problem["errors"], key=lambda error: error["field"]) == [
        {
            "field": "extra",
            "message": "is not a field of this request (unknown fields are refused)",
        },
        {
            "field": "phoneNumber",
            "message": "must be a phone number in international E.164 form: '+' and 7 to 15 "
            "digits, e.g. +15550100200",
        },
    ]
    assert "0044 12" not in refused.text  # the input is never echoed
    assert "phoneNumber must be a phone number" in problem["detail"]
    missing = (await http.post(ACTIONS, headers=DEVICE, json={})).json()
    assert missing["errors"] == [{"field": "type", "message": "is required"}]
    bad_type = (await http.post(ACTIONS, headers=DEVICE, json={"type": "Add To Favourites"})).json()
    assert bad_type["errors"][0]["message"].startswith("must be 1 to 64 lower-case letters")


_BROWSER = {"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"}

"""The OpenAPI document is written for the teams that integrate with the service: every
operation has a chosen camelCase ``operationId``, a summary and a description for a caller;
every body, sent or answered, has an example; every problem response lists its codes, each
with an example; the document describes itself, its server and its tags; an optional body
is optional; and no text refers to a document the repository does not contain."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import pytest

from pin_sessions.settings import DEFAULT_PUBLIC_URL

CAMEL_CASE = re.compile(r"^[a-z]+(?:[A-Z][a-z0-9]*)+$")
PRIVATE_REFERENCES = re.compile(r"SPEC\b|INV-[A-Z]+-\d+|\bseed 00\d|platform\.http|fast_path")
METHODS = {"get", "post", "put", "patch", "delete"}


@pytest.fixture
async def document(http: httpx.AsyncClient) -> dict[str, Any]:
    served: dict[str, Any] = (await http.get("/openapi.json")).json()
    return served


def _operations(document: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (method.upper(), path, operation)
        for path, operations in document["paths"].items()
        for method, operation in operations.items()
        if method in METHODS
    ]


def _schema(document: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    if "$ref" in schema:
        resolved: dict[str, Any] = document["components"]["schemas"][schema["$ref"].split("/")[-1]]
        return resolved
    return schema


def _has_example(document: dict[str, Any], media: dict[str, Any]) -> bool:
    schema = _schema(document, media.get("schema", {}))
    return bool(media.get("example") or media.get("examples") or schema.get("examples"))


def test_the_document_describes_itself_its_server_and_its_tags(document: dict[str, Any]) -> None:
    assert len(document["info"]["description"]) > 200
    assert document["servers"] == [{"url": DEFAULT_PUBLIC_URL, "description": "This service"}]
    described = {tag["name"]: tag["description"] for tag in document["tags"]}
    used = {tag for _, _, operation in _operations(document) for tag in operation["tags"]}
    assert used <= set(described)
    assert all(described.values())


def test_every_operation_has_a_chosen_id_a_summary_and_a_description(
    document: dict[str, Any],
) -> None:
    operations = _operations(document)
    ids = [operation["operationId"] for _, _, operation in operations]
    assert len(ids) == len(set(ids)) >= 29
    for method, path, operation in operations:
        assert CAMEL_CASE.fullmatch(operation["operationId"]), (method, path)
        assert operation["summary"] and len(operation["description"]) > 20, (method, path)
    assert {"startSession", "sendHeartbeat", "linkSession", "confirmSignIn"} <= set(ids)


def test_every_body_sent_or_answered_has_an_example(document: dict[str, Any]) -> None:
    for method, path, operation in _operations(document):
        body = operation.get("requestBody")
        for media in (body or {}).get("content", {}).values():
            assert _has_example(document, media), (method, path, "request")
        for status, response in operation["responses"].items():
            for media in response.get("content", {}).values():
                assert _has_example(document, media), (method, path, status)


def test_every_problem_response_lists_its_codes_each_with_an_example(
    document: dict[str, Any],
) -> None:
    for method, path, operation in _operations(document):
        for status, response in operation["responses"].items():
            media = response.get("content", {}).get("application/problem+json")
            if media is None:
                continue
            examples = media["examples"]
            assert examples, (method, path, status)
            for code, example in examples.items():
                assert f"`{code}`" in response["description"], (method, path, status, code)
                assert example["value"]["code"] == code
                assert example["value"]["status"] == int(status)
                assert example["value"]["type"].endswith(f"/problems/{code}")


def test_an_optional_body_is_optional_not_any_of_null(document: dict[str, Any]) -> None:
    start = document["paths"]["/api/user-activity/sessions/start"]["post"]["requestBody"]
    assert start["required"] is False
    for method, path, operation in _operations(document):
        for media in operation.get("requestBody", {}).get("content", {}).values():
            assert "anyOf" not in media["schema"], (method, path)


def test_every_schema_has_a_description(document: dict[str, Any]) -> None:
    missing = [
        name
        for name, schema in document["components"]["schemas"].items()
        if not schema.get("description")
    ]
    assert missing == []


def test_no_text_cites_a_document_the_repository_does_not_contain(
    document: dict[str, Any],
) -> None:
    assert PRIVATE_REFERENCES.findall(json.dumps(document)) == []

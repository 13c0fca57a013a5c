"""The README is a newcomer's first page: the quick start comes first and is short, and its
curl walkthrough works as written — each command run against the API, the placeholders
filled from the answers before it."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import httpx
import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
PLACEHOLDER = re.compile(r"<(id|request|code|token)>")


@pytest.fixture
def settings_env(settings_env: dict[str, str]) -> dict[str, str]:
    """As under ``make up``: the development codes on."""
    return settings_env | {"PIN_DEV_CODES": "1"}


def _section(lines: list[str], title: str) -> tuple[int, int]:
    """The first and last line (1-based) of the ``## title`` section."""
    first = lines.index(f"## {title}") + 1
    rest = [n for n, line in enumerate(lines[first:], first + 1) if line.startswith("## ")]
    return first, rest[0] - 1


def _walkthrough() -> list[list[str]]:
    text = README.read_text(encoding="utf-8")
    block = text.split("### A session and a sign-in, with curl", 1)[1]
    block = block.split("```sh\n", 1)[1].split("```", 1)[0].replace("\\\n", " ")
    commands = [line for line in block.splitlines() if line.startswith("curl ")]
    return [shlex.split(command) for command in commands]


def _request(words: list[str], known: dict[str, str]) -> tuple[str, str, dict[str, str], Any]:
    method, headers, body, url = "GET", {}, None, ""
    words = [PLACEHOLDER.sub(lambda found: known[found.group(1)], word) for word in words]
    words = [word.replace("$DEVICE", known.get("id", "")) for word in words]
    index = 1
    while index < len(words):
        word = words[index]
        if word == "-X":
            method, index = words[index + 1], index + 2
        elif word == "-H":
            name, _, value = words[index + 1].partition(": ")
            headers[name] = value
            index += 2
        elif word == "-d":
            body, index = json.loads(words[index + 1]), index + 2
        elif word == "-s":
            index += 1
        else:
            url, index = word, index + 1
    return method, url.removeprefix("$API"), headers, body


def test_the_quick_start_comes_first_and_is_short() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    first, last = _section(lines, "Quick start")
    assert first <= 40
    assert last - first < 80
    quick_start = "\n".join(lines[first:last])
    assert "make up" in quick_start and "make test" in quick_start
    assert "curl" in quick_start


async def test_the_curl_walkthrough_works_as_written(http: httpx.AsyncClient) -> None:
    known: dict[str, str] = {}
    answers = []
    for words in _walkthrough():
        method, path, headers, body = _request(words, known)
        answer = await http.request(method, path, headers=headers, json=body)
        assert answer.status_code in (200, 201), (method, path, answer.text)
        found = answer.json()
        known.update(
            {
                key: str(found[field])
                for key, field in (
                    ("id", "anonymousId"),
                    ("request", "requestId"),
                    ("code", "code"),
                    ("token", "accessToken"),
                )
                if field in found
            }
        )
        answers.append(found)
    assert len(answers) == 7
    [session] = answers[-1]["items"]
    assert session["anonymousId"] == known["id"]
    assert session["userId"] == answers[-3]["userId"] == answers[-2]["userId"]

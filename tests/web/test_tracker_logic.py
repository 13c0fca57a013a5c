"""The tracker's queue, backoff, consent and identity rules, unit-tested under ``node --test``.

The cases live in ``clients/js/test/`` (JavaScript, next to the tracker) and run against the
very file the API serves, with a scripted ``fetch``, storage and window: logic needs no browser.
What needs the page itself (tabs, visibility, reloads, other origins) is tested in Chromium by
the other modules here. ``make test`` runs these through this test, so one command runs all.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

CLIENT = Path(__file__).parents[2] / "clients" / "js"


def test_the_tracker_logic_cases_pass_under_node() -> None:
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is not installed (Node.js is a prerequisite of the tests)")
    ran = subprocess.run(
        [node, "--test", "--test-reporter=tap", "test/"],
        cwd=CLIENT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    counts = dict(re.findall(r"^# (pass|fail|cancelled) (\d+)$", ran.stdout, re.MULTILINE))
    failures = "\n".join(re.findall(r"^not ok .*$", ran.stdout, re.MULTILINE))
    assert ran.returncode == 0, f"{failures}\n\n{ran.stdout[-6000:]}{ran.stderr[-2000:]}"
    assert counts.get("fail") == "0" and counts.get("cancelled") == "0", ran.stdout[-3000:]
    assert int(counts.get("pass", "0")) > 0, "node --test found no cases"

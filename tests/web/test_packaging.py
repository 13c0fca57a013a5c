"""The tracker as a library: built by esbuild from ``clients/js/src``, its types checked by
``tsc``, ``npm pack`` shipping what a user needs, under the size budget, and the copies the
service serves being exactly this source's build.

The tools come from ``clients/js/node_modules`` (``npm ci``, pinned by the lockfile; ``make
test`` runs it); without them these tests fail and say so, they never skip.
"""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from pin_sessions.web.http import static_bytes

CLIENT = Path(__file__).parents[2] / "clients" / "js"
BUILDS = ("pin-tracker.js", "pin-tracker.iife.js")
# The budget of either build, minified and gzipped: what a page pays to load it.
GZIP_BUDGET_BYTES = 5 * 1024


def run(*command: str) -> subprocess.CompletedProcess[str]:
    if not (CLIENT / "node_modules" / ".bin" / "esbuild").exists():
        pytest.fail(
            "clients/js has no build tools: run `npm ci` there (`make test` does)", pytrace=False
        )
    if shutil.which(command[0]) is None:
        pytest.fail(f"{command[0]} is not installed (Node.js and npm are prerequisites)")
    return subprocess.run(command, cwd=CLIENT, capture_output=True, text=True, timeout=120)


def test_the_served_builds_are_the_build_of_the_source() -> None:
    """A change to clients/js/src without `npm run build:service` fails here."""
    checked = run("node", "build.mjs", "--check")
    assert checked.returncode == 0, checked.stderr


@pytest.mark.parametrize("name", BUILDS)
def test_each_build_is_within_5_kb_gzipped(name: str) -> None:
    size = len(gzip.compress(static_bytes(name), compresslevel=9))
    assert size <= GZIP_BUDGET_BYTES, f"{name} is {size} bytes gzipped"


def test_the_type_declarations_compile_with_the_documented_uses() -> None:
    checked = run("node", "node_modules/typescript/bin/tsc", "-p", "tsconfig.json")
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_npm_pack_ships_both_builds_their_maps_and_types(tmp_path: Path) -> None:
    # `npm pack` runs `prepack` (the type check again, then the build); the type check has its
    # test above, so this one builds and packs without running tsc a second time.
    manifest = json.loads((CLIENT / "package.json").read_text())
    assert manifest["scripts"]["prepack"] == "npm run typecheck && npm run build"
    built = run("node", "build.mjs")
    assert built.returncode == 0, built.stderr
    packed = run("npm", "pack", "--json", "--ignore-scripts", "--pack-destination", str(tmp_path))
    assert packed.returncode == 0, packed.stderr
    [package] = json.loads(packed.stdout)
    files = {entry["path"] for entry in package["files"]}
    assert files == {
        "package.json",
        "README.md",
        "dist/pin-tracker.js",
        "dist/pin-tracker.js.map",
        "dist/pin-tracker.iife.js",
        "dist/pin-tracker.iife.js.map",
        "dist/pin-tracker.d.ts",
    }
    # Real files with content, not links: a link is what npm pack used to ship, empty.
    assert all(entry["size"] > 0 for entry in package["files"])
    for target in (manifest["module"], manifest["types"], manifest["exports"]["./script"]):
        assert target.removeprefix("./") in files

"""The tracker as a library: built by esbuild from ``clients/js/src``, its types checked by
``tsc``, ``npm pack`` shipping what a user needs — a tarball that installs into an empty
project and loads there by ``import`` and ``require``, with types for both — under the size
budget, inert under Node (``clients/js/test``, run with ``node --test``), and the copies the
service serves being exactly this source's build.

The tools come from ``clients/js/node_modules`` (``npm ci``, pinned by the lockfile; ``make
test`` runs it); without them these tests fail and say so, they never skip.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from pin_sessions.web.http import static_bytes

CLIENT = Path(__file__).parents[2] / "clients" / "js"
BUILDS = ("pin-tracker.js", "pin-tracker.iife.js")
# The budget of either build, minified and gzipped: what a page pays to load it.
GZIP_BUDGET_BYTES = 5 * 1024


def run(
    *command: str, cwd: Path = CLIENT, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    if not (CLIENT / "node_modules" / ".bin" / "esbuild").exists():
        pytest.fail(
            "clients/js has no build tools: run `npm ci` there (`make test` does)", pytrace=False
        )
    if shutil.which(command[0]) is None:
        pytest.fail(f"{command[0]} is not installed (Node.js and npm are prerequisites)")
    return subprocess.run(
        command,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env=None if env is None else {**os.environ, **env},
    )


@pytest.fixture(scope="module")
def packed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """``npm pack`` once for the module: the tarball and npm's account of it.

    ``npm pack`` runs ``prepack`` (the type check, then the build); the type check has its own
    test, so this builds and packs without running tsc a second time.
    """
    manifest = json.loads((CLIENT / "package.json").read_text())
    assert manifest["scripts"]["prepack"] == "npm run typecheck && npm run build"
    built = run("node", "build.mjs")
    assert built.returncode == 0, built.stderr
    destination = tmp_path_factory.mktemp("pack")
    result = run(
        "npm", "pack", "--json", "--ignore-scripts", "--pack-destination", str(destination)
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    [package] = json.loads(result.stdout)
    return destination / package["filename"], package


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


def test_npm_pack_ships_every_build_its_map_and_types(
    packed: tuple[Path, dict[str, Any]],
) -> None:
    _, package = packed
    files = {entry["path"] for entry in package["files"]}
    assert files == {
        "package.json",
        "README.md",
        "dist/pin-tracker.js",
        "dist/pin-tracker.js.map",
        "dist/pin-tracker.cjs",
        "dist/pin-tracker.cjs.map",
        "dist/pin-tracker.iife.js",
        "dist/pin-tracker.iife.js.map",
        "dist/pin-tracker.d.ts",
        "dist/pin-tracker.d.cts",
    }
    # Real files with content, not links: a link is what npm pack used to ship, empty.
    assert all(entry["size"] > 0 for entry in package["files"])
    manifest = json.loads((CLIENT / "package.json").read_text())
    for target in (manifest["main"], manifest["module"], manifest["types"]):
        assert target.removeprefix("./") in files
    exported = manifest["exports"]["."]
    for condition in ("import", "require"):
        for target in exported[condition].values():
            assert target.removeprefix("./") in files, (condition, target)
    assert manifest["exports"]["./script"].removeprefix("./") in files


def test_the_manifest_is_publishable() -> None:
    """Not private, with a version, a license, the files it ships, and types for import
    and require (the name is the one the README installs)."""
    manifest = json.loads((CLIENT / "package.json").read_text())
    assert "private" not in manifest
    assert manifest["name"] == "@pin/sessions-tracker"
    assert re.fullmatch(r"\d+\.\d+\.\d+", manifest["version"])
    assert manifest["license"]
    assert manifest["files"] == ["dist", "README.md"]
    exported = manifest["exports"]["."]
    assert list(exported) == ["import", "require"]
    assert list(exported["import"]) == ["types", "default"]  # types first, as TypeScript asks
    assert list(exported["require"]) == ["types", "default"]
    readme = (CLIENT / "README.md").read_text()
    assert f"{manifest['name']}" in readme and "npm pack" in readme


# An empty project's uses of the package: ES module and CommonJS, at run time and to tsc.
USES = {
    "use.mjs": 'import { createTracker } from "@pin/sessions-tracker";\n'
    'console.log("import", createTracker({ baseUrl: "https://sessions.example" }).status);\n',
    "use.cjs": 'const { createTracker } = require("@pin/sessions-tracker");\n'
    'console.log("require", createTracker({ baseUrl: "https://sessions.example" }).status);\n',
    "types.mts": 'import { createTracker, type TrackerStatus } from "@pin/sessions-tracker";\n'
    "export const status: TrackerStatus = createTracker().status;\n",
    "types.cts": 'import tracker = require("@pin/sessions-tracker");\n'
    "export const status: tracker.TrackerStatus = tracker.createTracker().status;\n",
    "tsconfig.json": json.dumps(
        {
            "compilerOptions": {
                "strict": True,
                "noEmit": True,
                "module": "nodenext",
                "moduleResolution": "nodenext",
                "target": "ES2022",
                "lib": ["ES2022", "DOM"],
                "types": [],
            },
            "files": ["types.mts", "types.cts"],
        }
    ),
}


def test_the_packed_tarball_installs_offline_into_an_empty_project_and_loads_in_node(
    packed: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    tarball, _ = packed
    project = tmp_path / "project"
    project.mkdir()
    (project / "package.json").write_text('{"name": "probe", "version": "1.0.0", "private": true}')
    # Offline, with a cache of its own: the tarball is all it needs.
    offline = {"npm_config_cache": str(tmp_path / "npm-cache")}
    installed = run(
        "npm", "install", "--offline", "--no-audit", "--no-fund", str(tarball),
        cwd=project, env=offline,
    )  # fmt: skip
    assert installed.returncode == 0, installed.stderr
    for name, text in USES.items():
        (project / name).write_text(text)
    for use, said in (("use.mjs", "import no-browser"), ("use.cjs", "require no-browser")):
        loaded = run("node", use, cwd=project)
        assert loaded.returncode == 0, loaded.stderr
        assert loaded.stdout.strip() == said  # and it exited: nothing keeps Node alive
    typed = run("node", str(CLIENT / "node_modules/typescript/bin/tsc"), "-p", ".", cwd=project)
    assert typed.returncode == 0, typed.stdout + typed.stderr


def test_the_tracker_is_inert_outside_a_browser() -> None:
    """clients/js/test/no-browser.test.mjs under Node's own test runner."""
    tested = run("node", "--test", "test/no-browser.test.mjs")
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "# fail 0" in tested.stdout

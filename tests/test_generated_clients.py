"""Clients generated from the served OpenAPI document work, as an integrating team would
generate them: openapi-python-client's Python package and openapi-typescript's types (with
openapi-fetch, their typed fetch) each start a session over real HTTP, with no body — the
start's optional body must be omittable — and read the issued ``anonymousId``."""

from __future__ import annotations

import importlib
import json
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
TRACKER = ROOT / "clients" / "js"
BIN = TRACKER / "node_modules" / ".bin"
# openapi-python-client formats what it writes with ruff by default: not needed to run it.
GENERATOR_CONFIG = "post_hooks: []\n"
TYPESCRIPT_CALL = """\
import createClient from "openapi-fetch";
import type { paths } from "./api.js";

declare const process: { argv: string[] };

const client = createClient<paths>({ baseUrl: process.argv[2] });
const { data, error, response } = await client.POST("/api/user-activity/sessions/start", {
  params: { header: { "Idempotency-Key": "generated-ts" } },
});
if (error !== undefined || data === undefined) throw new Error(`refused: ${response.status}`);
const anonymousId: string = data.anonymousId;
console.log(JSON.stringify({ status: response.status, anonymousId, created: data.created }));
"""


def _document(api_url: str, folder: Path) -> Path:
    path = folder / "openapi.json"
    path.write_text(httpx.get(f"{api_url}/openapi.json", timeout=30).text, encoding="utf-8")
    return path


def _run(*command: str | Path, cwd: Path) -> str:
    done = subprocess.run(
        [str(part) for part in command], cwd=cwd, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_a_generated_python_client_starts_a_session(api_url: str, tmp_path: Path) -> None:
    document = _document(api_url, tmp_path)
    config = tmp_path / "generator.yaml"
    config.write_text(GENERATOR_CONFIG, encoding="utf-8")
    generator = Path(sys.executable).parent / "openapi-python-client"
    _run(generator, "generate", "--path", document, "--config", config, "--meta", "none",
         "--output-path", tmp_path / "pin_client", cwd=tmp_path)  # fmt: skip
    sys.path.insert(0, str(tmp_path))
    try:
        client_module = importlib.import_module("pin_client.client")
        start = importlib.import_module("pin_client.api.user_activity.start_session")
        client = client_module.Client(base_url=api_url)
        answer = start.sync_detailed(client=client, idempotency_key="generated-python")
    finally:
        sys.path.remove(str(tmp_path))
        for name in [name for name in sys.modules if name.startswith("pin_client")]:
            del sys.modules[name]
    assert answer.status_code == 200, answer.content
    assert answer.parsed is not None
    assert uuid.UUID(str(answer.parsed.anonymous_id))
    assert answer.parsed.created is True


def test_generated_typescript_types_type_check_and_start_a_session(
    api_url: str, tmp_path: Path
) -> None:
    document = _document(api_url, tmp_path)
    _run(BIN / "openapi-typescript", document, "--output", tmp_path / "api.d.ts", cwd=TRACKER)
    (tmp_path / "call.ts").write_text(TYPESCRIPT_CALL, encoding="utf-8")
    (tmp_path / "package.json").write_text('{"type": "module"}', encoding="utf-8")
    # openapi-fetch is resolved from the tracker's installed packages.
    (tmp_path / "node_modules").symlink_to(TRACKER / "node_modules")
    _run(BIN / "tsc", "--strict", "--target", "es2022", "--module", "nodenext",
         "--moduleResolution", "nodenext", "--skipLibCheck", "call.ts", cwd=tmp_path)  # fmt: skip
    node = shutil.which("node")
    assert node is not None, "node not found: the tests need Node.js 18+ (see README)"
    printed = json.loads(_run(node, "call.js", api_url, cwd=tmp_path))
    assert printed["status"] == 200
    assert uuid.UUID(printed["anonymousId"])
    assert printed["created"] is True

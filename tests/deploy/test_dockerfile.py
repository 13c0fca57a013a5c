"""The image (SPEC §9): multi-stage, slim, non-root, runtime dependencies only. Docker does
not run here, so the Dockerfile is read as text; what the image installs is checked
against what the shipped code imports."""

from __future__ import annotations

import ast
import importlib.metadata
import json
import re
import shlex
import sys
import tomllib
from dataclasses import dataclass, field

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.support.promql import PROJECT_ROOT

DOCKERFILE = PROJECT_ROOT / "Dockerfile"
DOCKERIGNORE = PROJECT_ROOT / ".dockerignore"


@dataclass
class Stage:
    base: str
    name: str
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [args for kw, args in self.instructions if kw == keyword]


def parse_dockerfile() -> tuple[dict[str, str], list[Stage]]:
    """Global ARG defaults and the stages, each with its instructions (continuations joined)."""
    logical: list[str] = []
    pending = ""
    for raw in DOCKERFILE.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in logical:
        keyword, _, rest = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            words = rest.split()
            base = words[0]
            for name, value in args.items():
                base = base.replace(f"${{{name}}}", value)
            stages.append(Stage(base, words[2] if len(words) > 2 else str(len(stages))))
        elif stages:
            stages[-1].instructions.append((keyword, rest))
        elif keyword == "ARG":
            name, _, value = rest.partition("=")
            args[name] = value
    return args, stages


def test_the_image_is_built_in_one_stage_and_run_from_a_slim_one() -> None:
    _, stages = parse_dockerfile()
    build, runtime = stages[0], stages[-1]

    assert len(stages) >= 2
    assert runtime.base.endswith(("-slim", "-slim-bookworm")), runtime.base
    assert [args for args in runtime.all("COPY")] == [
        f"--from={build.name} /opt/pin-sessions /opt/pin-sessions"
    ], "the runtime stage takes the built virtualenv and nothing else"
    assert not runtime.all("RUN") or all("pip" not in run for run in runtime.all("RUN"))


def test_the_image_runs_as_an_unprivileged_user() -> None:
    _, stages = parse_dockerfile()
    users = stages[-1].all("USER")

    assert users, "no USER: the process would run as root"
    user = users[-1].split(":")[0]
    assert user not in {"root", "0"}
    assert user.isdigit() and int(user) >= 1000, "a numeric uid lets runAsNonRoot check it"


def test_the_image_installs_the_project_without_its_dev_extra() -> None:
    _, stages = parse_dockerfile()
    installs = [
        words
        for stage in stages
        for run in stage.all("RUN")
        for command in run.split("&&")
        if "install" in (words := shlex.split(command)) and words[0].endswith("pip")
    ]

    assert installs == [["/opt/pin-sessions/bin/pip", "install", "."]]
    assert not any("[" in args for stage in stages for args in stage.all("RUN")), "no extras"


def test_the_image_starts_pin_sessions_and_checks_its_health() -> None:
    _, stages = parse_dockerfile()
    runtime = stages[-1]

    assert json.loads(runtime.all("ENTRYPOINT")[-1]) == ["pin-sessions"]
    assert json.loads(runtime.all("CMD")[-1])[0] == "serve"
    healthcheck = runtime.all("HEALTHCHECK")[-1]
    assert "CMD" in healthcheck and "/healthz" in healthcheck
    assert "8000" in runtime.all("EXPOSE")[-1].split()


def test_the_build_context_is_what_the_build_copies() -> None:
    patterns = [
        line.strip()
        for line in DOCKERIGNORE.read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ]
    allowed = {p[1:].rstrip("/") for p in patterns if p.startswith("!")}
    _, stages = parse_dockerfile()
    copied = {
        source.rstrip("/")
        for copy in stages[0].all("COPY")
        for source in copy.split()[:-1]
        if not source.startswith("--")
    }

    assert patterns[0] == "*", "everything out by default: no .venv, .pin or .git in the context"
    assert copied == allowed
    # `pip install .` reads the readme pyproject.toml names.
    readme = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["project"]["readme"]
    assert readme in copied


def runtime_distributions() -> set[str]:
    """[project.dependencies] and everything they require, as installed here."""
    pyproject = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    todo = [Requirement(text) for text in pyproject["project"]["dependencies"]]
    seen: set[str] = set()
    while todo:
        requirement = todo.pop()
        name = canonicalize_name(requirement.name)
        if name in seen:
            continue
        seen.add(name)
        extras = requirement.extras or {""}
        for text in importlib.metadata.requires(name) or []:
            needed = Requirement(text)
            if needed.marker is None or any(
                needed.marker.evaluate({"extra": extra}) for extra in extras
            ):
                todo.append(needed)
    return seen


def imported_modules() -> set[str]:
    """Top-level modules the shipped code imports, beyond the standard library."""
    modules = set()
    for path in (PROJECT_ROOT / "src").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                modules |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules.add(node.module.split(".")[0])
    return modules - set(sys.stdlib_module_names) - {"__future__", "pin_sessions"}


def test_the_service_imports_only_its_runtime_dependencies() -> None:
    # The image installs [project.dependencies] only: a module from the dev extra would
    # start here and fail in production.
    runtime = runtime_distributions()
    owners = importlib.metadata.packages_distributions()
    imported = imported_modules()

    assert {"fastapi", "asyncpg", "confluent_kafka"} <= imported
    outside = {
        module
        for module in imported
        if not {canonicalize_name(d) for d in owners.get(module, [])} & runtime
    }
    assert outside == set()


def _make_rules() -> dict[str, tuple[list[str], list[str]]]:
    """Makefile targets: their prerequisites and recipe lines (variables as written)."""
    rules: dict[str, tuple[list[str], list[str]]] = {}
    target = None
    for line in (PROJECT_ROOT / "Makefile").read_text(encoding="utf-8").splitlines():
        if line.startswith("\t") and target:
            rules[target][1].append(line.strip())
        elif ":" in line and not line.startswith(("#", " ", ".")) and ":=" not in line:
            target, _, prerequisites = line.partition(":")
            rules[target] = (prerequisites.replace("|", " ").split(), [])
        else:
            target = None
    return rules


def test_make_up_installs_the_runtime_dependencies_and_make_test_the_dev_extra() -> None:
    rules = _make_rules()
    variables = dict(
        re.findall(r"^([A-Z_]+) := (.+)$", (PROJECT_ROOT / "Makefile").read_text(), re.M)
    )

    def installs(goal: str) -> list[str]:
        stamp = next(p for p in rules[goal][0] if p.startswith("$("))
        return [line for line in rules[stamp][1] if "pip install" in line and "-e" in line]

    assert [line.split()[-1] for line in installs("up")] == ["."]
    assert [line.split()[-1] for line in installs("test")] == ["'.[dev]'"]
    assert variables["STAMP"] != variables["RUNTIME_STAMP"]

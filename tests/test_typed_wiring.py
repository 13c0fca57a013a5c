"""Routes read what the composition root built through typed dependencies, never by name.

The app's services are one typed ``AppServices`` (``platform/http/wiring.py``), each
context's object found by its class; that module alone touches ``app.state``. Read from the
source, so a module that goes back to ``getattr(app.state, "…")``, ``app.state.<name>`` or
a ``state(request, "…")`` helper fails here whatever its tests do.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import pin_sessions

PACKAGE = Path(pin_sessions.__file__).parent
# The one door: it puts AppServices on the app and reads it back, typed.
WIRING = PACKAGE / "platform" / "http" / "wiring.py"
ATTRIBUTE_CALLS = frozenset({"getattr", "setattr", "hasattr", "delattr"})


def _names_an_app(node: ast.expr) -> bool:
    """``app``, ``request.app``, ``self._app``: an expression whose last name is an app's."""
    name = node.id if isinstance(node, ast.Name) else getattr(node, "attr", "")
    return isinstance(name, str) and name.lower().endswith("app")


def _called(node: ast.AST) -> str | None:
    """The name a call calls: ``state`` for ``state(…)`` and ``dependencies.state(…)``."""
    if not isinstance(node, ast.Call):
        return None
    if isinstance(node.func, ast.Name):
        return node.func.id
    return node.func.attr if isinstance(node.func, ast.Attribute) else None


def _string_keyed_lookups(source: str) -> list[str]:
    """Where ``source`` reaches the app's state by name: ``line: code``."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        on_app_state = (
            isinstance(node, ast.Attribute) and node.attr == "state" and _names_an_app(node.value)
        )
        by_attribute_name = (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ATTRIBUTE_CALLS
            and bool(node.args)
            and isinstance(node.args[0], ast.Attribute)
            and node.args[0].attr == "state"
        )
        by_helper = (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name | ast.Attribute)
            and (node.func.id if isinstance(node.func, ast.Name) else node.func.attr) == "state"
            and any(
                isinstance(arg, ast.Constant) and isinstance(arg.value, str) for arg in node.args
            )
        )
        if (on_app_state or by_attribute_name or by_helper) and isinstance(node, ast.expr):
            found.append(f"{node.lineno}: {ast.unparse(node)[:80]}")
    return found


def test_no_module_but_the_wiring_reaches_the_apps_state() -> None:
    modules = [path for path in sorted(PACKAGE.rglob("*.py")) if path != WIRING]
    assert len(modules) > 100
    offenders = {
        str(path.relative_to(PACKAGE)): found
        for path in modules
        if (found := _string_keyed_lookups(path.read_text(encoding="utf-8")))
    }
    assert offenders == {}


@pytest.mark.parametrize(
    "source",
    [
        'getattr(request.app.state, "heartbeats")',
        'setattr(app.state, "identity", operations)',
        "request.app.state.heartbeats",
        "self.readiness = app.state.readiness",
        'heartbeats = state(request, "heartbeats", Heartbeats)',
        'dependencies.state(request, "key_set", KeySet)',
    ],
)
def test_the_check_finds_a_string_keyed_lookup(source: str) -> None:
    assert _string_keyed_lookups(source) != []


def test_the_check_leaves_other_state_alone() -> None:
    # A read replica's state is its own attribute, not the app's.
    assert _string_keyed_lookups("reason = str(replica.state)") == []
    assert _string_keyed_lookups("services = app_services(request.app)") == []

"""The ``e2e`` marker, found rather than written: what ``make check`` leaves to ``make test``.

A test is end to end when it, or a fixture it uses, starts a process, serves the API over a
socket (uvicorn), or drives a browser or a broker. That is read from the code at collection:
the names a test function and its fixtures use are followed through the suite's own helpers
(``tests.*``) until one reaches :data:`OUTSIDE` — so a helper that calls ``subprocess`` makes
every caller e2e, and a new test needs no marker of its own. A fixture asked for by name
(``request.getfixturevalue``) counts as used. ``@pytest.mark.e2e`` written by hand adds a test
the reading cannot see.
"""

from __future__ import annotations

import inspect
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any

import pytest

E2E = "e2e"
# Modules whose use means a process, a served socket, a browser or a broker.
OUTSIDE = frozenset({"subprocess", "multiprocessing", "uvicorn", "playwright", "confluent_kafka"})
OUTSIDE_FUNCTIONS = frozenset({"create_subprocess_exec", "create_subprocess_shell", "fork"})


def mark_e2e(items: list[pytest.Item]) -> None:
    """Add the ``e2e`` marker to every collected test that reaches outside the process."""
    reading = _Reading()
    for item in items:
        if isinstance(item, pytest.Function) and reading.item_reaches_outside(item):
            item.add_marker(E2E)


class _Reading:
    """Memoised per function: the suite has a few thousand of them, read once each."""

    def __init__(self) -> None:
        self._seen: dict[int, bool] = {}

    def item_reaches_outside(self, item: pytest.Function) -> bool:
        if item.get_closest_marker(E2E) is not None:
            return False  # marked by hand already
        manager = item.session._fixturemanager
        functions: list[Callable[..., Any]] = [item.function]
        for name in item.fixturenames:
            functions += [d.func for d in manager.getfixturedefs(name, item) or ()]
        for function in functions:
            if self._reaches(function, lambda name: manager.getfixturedefs(name, item)):
                return True
        return False

    def _reaches(self, function: Callable[..., Any], fixtures: Callable[[str], Any]) -> bool:
        function = inspect.unwrap(function)
        key = id(function)
        if key not in self._seen:
            self._seen[key] = False  # a cycle of helpers ends here
            self._seen[key] = self._read(function, fixtures)
        return self._seen[key]

    def _read(self, function: Callable[..., Any], fixtures: Callable[[str], Any]) -> bool:
        code = getattr(function, "__code__", None)
        if code is None:
            return False
        scope: dict[str, Any] = getattr(function, "__globals__", {})
        for name, constant in _names(code):
            if constant:
                for fixture in fixtures(name) or ():
                    if self._reaches(fixture.func, fixtures):
                        return True
                continue
            if name in OUTSIDE_FUNCTIONS:
                return True
            value = scope.get(name)
            if value is None:
                continue
            if _is_outside(value):
                return True
            for helper in _suite_functions(value):
                if self._reaches(helper, fixtures):
                    return True
        return False


def _names(code: types.CodeType) -> Iterator[tuple[str, bool]]:
    """Global and attribute names a code object (and the code nested in it) uses, and its
    string constants (flagged True: a fixture may be asked for by name)."""
    yield from ((name, False) for name in code.co_names)
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            yield from _names(constant)
        elif isinstance(constant, str) and constant.isidentifier():
            yield constant, True


def _is_outside(value: object) -> bool:
    module = value.__name__ if isinstance(value, types.ModuleType) else _module_of(value)
    return module.split(".", 1)[0] in OUTSIDE


def _module_of(value: object) -> str:
    module = getattr(value, "__module__", None)
    return module if isinstance(module, str) else ""


def _suite_functions(value: object) -> Iterator[Callable[..., Any]]:
    """The suite's own functions behind a name: a helper, or a helper class's methods."""
    if not _module_of(value).startswith("tests.") or value is sys.modules.get(_module_of(value)):
        return
    if inspect.isfunction(value):
        yield value
    elif inspect.isclass(value):
        for member in vars(value).values():
            if isinstance(member, staticmethod | classmethod):
                member = member.__func__
            if isinstance(member, property):
                member = member.fget
            if inspect.isfunction(member):
                yield member

"""A context's repository is its one door to the database (docs/architecture.md).

Operations, use cases, jobs, consumers, routes and ``user_data`` call the repository's
functions; only the repository runs a statement on a connection. Read from the source, so
a module that starts calling ``conn.execute`` again, or loads the context's queries
itself, fails here whatever its tests do.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import pin_sessions

PACKAGE = Path(pin_sessions.__file__).parent

# What asyncpg runs a statement with, on a connection or a query object.
STATEMENT_CALLS = frozenset(
    {"fetch", "fetchrow", "fetchval", "execute", "executemany", "prepare", "cursor"}
)
# Contexts whose SQL lives in queries.sql behind a repository.
CONTEXTS = ["dev_stats", "identity", "user_activity"]


def _outside_the_repository(context: str) -> list[Path]:
    root = PACKAGE / context
    return sorted(
        path
        for path in root.rglob("*.py")
        if path.relative_to(root).parts[0] not in ("repository", "repository.py")
    )


def _statements_run(path: Path) -> list[str]:
    """Where ``path`` runs a statement or reaches for the queries itself: ``line: code``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: list[str] = []
    for node in ast.walk(tree):
        runs = (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in STATEMENT_CALLS
        )
        loads = isinstance(node, ast.Name) and node.id in ("QUERIES", "load_queries")
        if (runs or loads) and isinstance(node, ast.expr):
            found.append(f"{node.lineno}: {ast.unparse(node)[:80]}")
    return found


@pytest.mark.parametrize("context", CONTEXTS)
def test_only_the_repository_runs_the_contexts_statements(context: str) -> None:
    modules = _outside_the_repository(context)
    assert modules, f"{context} has no modules"
    offenders = {
        str(path.relative_to(PACKAGE)): found
        for path in modules
        if (found := _statements_run(path))
    }
    assert offenders == {}


@pytest.mark.parametrize("context", CONTEXTS)
def test_the_context_keeps_no_sql_module_beside_its_queries_file(context: str) -> None:
    assert (PACKAGE / context / "queries.sql").is_file()
    assert not (PACKAGE / context / "sql.py").exists()

"""SQL in named files (``platform/queries.py``): the format, the parameters, the calls."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import pytest

import pin_sessions
from pin_sessions.platform.queries import (
    QueryFileError,
    compile_parameters,
    load_queries,
    parse_queries,
)
from pin_sessions.platform.runtime import Runtime

PACKAGE = Path(pin_sessions.__file__).parent

FILE = """\
-- The file's header: what it holds.

-- === A group of queries ===

-- name: by_ids
-- Why: the ids come as one array, so the statement is prepared once for any count.
select id from unnest(:ids::uuid[]) as t (id)
where id <> :excluded and :excluded is not null;

-- name: constant
-- A statement without parameters.
select 1

-- === Another group: its header is no part of the statement above ===
"""


def test_named_parameters_become_positional_in_order_of_first_appearance() -> None:
    queries = parse_queries(FILE)

    by_ids = queries.by_ids
    assert by_ids.params == ("ids", "excluded")
    assert by_ids.text == (
        "select id from unnest($1::uuid[]) as t (id)\nwhere id <> $2 and $2 is not null"
    )
    assert by_ids.doc.startswith("Why: the ids come as one array")
    assert by_ids.args(excluded="b", ids=["a"]) == (["a"], "b")
    assert queries["constant"].text == "select 1"
    assert queries.constant.args() == ()
    assert list(queries) == ["by_ids", "constant"]


def test_a_missing_or_unknown_argument_is_an_error_naming_it() -> None:
    query = parse_queries(FILE).by_ids

    with pytest.raises(TypeError, match="excluded"):
        query.args(ids=[])
    with pytest.raises(TypeError, match="exclude"):
        query.args(ids=[], excluded=None, exclude=None)
    with pytest.raises(TypeError):
        query.args([], None)  # positional arguments are not taken
    with pytest.raises(TypeError, match=r"by_ids\.fetchval\(\) missing .* 'excluded'"):
        query.fetchval(object(), ids=[])


def test_a_query_is_an_ordinary_attribute_of_its_file() -> None:
    """``QUERIES.name`` in a repository is a plain attribute hit, not the ``__getattr__``
    fallback Python reaches only after a failed lookup (bench/queries.py: ~1 µs a call)."""
    queries = parse_queries(FILE)

    assert object.__getattribute__(queries, "by_ids") is queries["by_ids"]
    assert object.__getattribute__(queries, "constant") is queries["constant"]


@pytest.mark.parametrize("name", ["items", "get", "origin"])
def test_a_name_the_queries_object_has_already_is_refused(name: str) -> None:
    with pytest.raises(QueryFileError, match=f"f.sql: '{name}' is taken by the queries object"):
        parse_queries(f"-- name: {name}\n-- why\nselect 1", origin="f.sql")


def test_an_unknown_query_name_is_an_error_naming_the_file() -> None:
    queries = parse_queries(FILE, origin="ctx/queries.sql")

    with pytest.raises(AttributeError, match=r"ctx/queries.sql has no query named 'by_id'"):
        _ = queries.by_id


@pytest.mark.parametrize(
    ("statement", "compiled"),
    [
        ("select :a::int, :a", "select $1::int, $1"),
        ("select ':not_a_param', :b", "select ':not_a_param', $1"),
        ("select 'it''s :x', :b", "select 'it''s :x', $1"),
        ("select E'\\' :x', :b", "select E'\\' :x', $1"),
        ('select 1 as ":x", :b', 'select 1 as ":x", $1'),
        ("select :b -- not :this one\n, :c", "select $1 -- not :this one\n, $2"),
        ("select /* :x */ :b", "select /* :x */ $1"),
        ("select $fn$ :x $fn$, $$ :y $$, :b", "select $fn$ :x $fn$, $$ :y $$, $1"),
        ("select now()::date", "select now()::date"),
        ("select :b:: text", "select $1:: text"),
    ],
)
def test_literals_comments_and_casts_are_left_alone(statement: str, compiled: str) -> None:
    assert compile_parameters(statement)[0] == compiled


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("select 1\n-- name: x\n-- why\nselect 1", "SQL before the first"),
        ("-- name: x\nselect 1", "needs a comment that says why"),
        ("-- name: x\n-- why\n", "has no statement"),
        ("-- name: x\n-- why\nselect 1\n-- name: x\n-- why\nselect 2", "used twice"),
        ("-- name: x-y\n-- why\nselect 1", "is not a query name"),
        ("-- name: class\n-- why\nselect 1", "is not a query name"),
        ("-- name: x\n-- why\nselect $1", "name the parameter"),
        ("-- name: x\n-- why\nselect :from", "Python keyword"),
    ],
)
def test_a_malformed_file_is_refused_with_its_line(text: str, message: str) -> None:
    with pytest.raises(QueryFileError, match=message):
        parse_queries(text, origin="f.sql")


async def test_a_query_runs_on_a_connection_with_keyword_arguments(runtime: Runtime) -> None:
    queries = parse_queries(FILE)
    keep, drop = uuid.uuid4(), uuid.uuid4()

    async with runtime.database.connection() as conn:
        rows = await queries.by_ids.fetch(conn, ids=[keep, drop], excluded=drop)
        assert [row["id"] for row in rows] == [keep]
        row = await queries.by_ids.fetchrow(conn, ids=[keep], excluded=drop)
        assert row is not None and row["id"] == keep
        assert await queries.by_ids.fetchval(conn, ids=[drop], excluded=drop) is None
        assert await queries.constant.execute(conn) == "SELECT 1"


def service_query_files() -> list[Path]:
    """Every ``queries.sql`` the service ships (migrations are another format)."""
    return sorted(PACKAGE.rglob("queries.sql"))


def test_the_service_keeps_its_statements_in_queries_files() -> None:
    contexts = {path.parent.name for path in service_query_files()}
    assert {"dev_stats", "identity", "user_activity"} <= contexts


async def test_every_query_of_the_service_prepares_on_the_schema_and_is_used_by_code(
    runtime: Runtime,
) -> None:
    for path in service_query_files():
        package = ".".join(path.parent.relative_to(PACKAGE.parent).parts)
        queries = load_queries(package)
        code = "\n".join(source.read_text(encoding="utf-8") for source in path.parent.rglob("*.py"))
        async with runtime.database.connection() as conn:
            for name, query in queries.items():
                # Parsed, planned against the migrated schema, its parameters' types inferred.
                await conn.prepare(query.text)
                assert re.search(rf"\.{name}\b", code), f"{queries.origin}: {name} is unused"

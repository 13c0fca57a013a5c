"""SQL in named files: a context's statements in one ``queries.sql``, loaded once.

The file is SQL, read and reviewed as SQL (procrastinate keeps its queries the same way)::

    -- What this file holds: comment lines before the first block head the file.

    -- name: record_fact
    -- Why the statement is as it is: one or more comment lines, required.
    insert into dev_stats.session_facts (session_id, recorded_at)
    values (:session_id, :now)

A block starts at a ``-- name: <identifier>`` line. The comment lines right after it are
its documentation; the lines up to the next block are its statement (a final ``;`` is
dropped, and so are comment lines that end a block: they head the next group of queries).

Parameters are named ``:name``. The loader compiles them once, when the file is loaded,
to asyncpg's ``$1 … $n``, numbered by first appearance (a name used twice is one
parameter). Casts (``:ids::uuid[]``), string literals, quoted identifiers, comments and
dollar-quoted bodies are left alone; a ``$1`` written by hand is refused, so a file never
mixes the two styles. (An array slice ``a[1:n]`` would read ``:n`` as a parameter: write
``a[1 : n]``.)

A query is run with keyword arguments, on the caller's connection::

    QUERIES = load_queries(__package__)
    await QUERIES.record_fact.execute(conn, session_id=fact.session_id, now=now)

A missing or unknown name is a ``TypeError`` at the call, naming the query and the
argument. Each call is a function made for the query when it is loaded, taking exactly its
parameters, keyword-only, and passing them on in ``$n`` order: CPython matches the names
itself and no dictionary is built, so a named call costs about 0.1 µs more than a
positional one (``bench/queries.py``). The statement text is built once, and the query
is a plain attribute of ``QUERIES``.
"""

from __future__ import annotations

import keyword
import re
from collections.abc import Awaitable, Callable, Iterator, Mapping
from importlib import resources
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import asyncpg

DEFAULT_FILE = "queries.sql"

_CALLS = ("fetch", "fetchrow", "fetchval", "execute")
_NAME_LINE = re.compile(r"^--\s*name:\s*(?P<name>\S*)\s*$")
_IDENTIFIER = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
# What a statement holds, as far as parameters go: things to leave alone (literals,
# quoted identifiers, comments, dollar-quoted bodies, casts), a positional parameter
# (refused) and a named one.
_TOKENS = re.compile(
    r"""
      (?P<skip>
          (?<!\w)[eE]'(?:[^'\\]|\\.|'')*'              # E'...' with backslash escapes
        | '(?:[^']|'')*'                               # a string literal
        | "(?:[^"]|"")*"                               # a quoted identifier
        | --[^\n]*                                     # a line comment
        | /\*.*?\*/                                    # a block comment
        | \$(?P<tag>(?:[A-Za-z_]\w*)?)\$.*?\$(?P=tag)\$  # a dollar-quoted body
        | ::                                           # a cast
      )
    | (?P<positional>\$\d+)
    | :(?P<name>[A-Za-z]\w*)
    """,
    re.DOTALL | re.VERBOSE,
)


class QueryFileError(ValueError):
    """A ``.sql`` file that does not follow the format; the message names file and line."""


class Query:
    """One named statement: its compiled text, its parameters in ``$n`` order, its why.

    ``fetch``, ``fetchrow``, ``fetchval`` and ``execute`` take the connection, then the
    parameters by name, and return the driver's own coroutine.
    """

    __slots__ = (
        "args",
        "doc",
        "execute",
        "fetch",
        "fetchrow",
        "fetchval",
        "name",
        "params",
        "text",
    )

    args: Callable[..., tuple[Any, ...]]
    fetch: Callable[..., Awaitable[list[asyncpg.Record]]]
    fetchrow: Callable[..., Awaitable[asyncpg.Record | None]]
    fetchval: Callable[..., Awaitable[Any]]
    # The command tag (``UPDATE 3``): ``platform.batching.rows_affected`` reads it.
    execute: Callable[..., Awaitable[str]]

    def __init__(self, name: str, doc: str, text: str, params: tuple[str, ...]) -> None:
        self.name = name
        self.doc = doc
        # The statement as asyncpg takes it, with $1 … $n.
        self.text = text
        self.params = params
        for method, function in _callers(name, text, params).items():
            setattr(self, method, function)

    def __repr__(self) -> str:
        return f"<Query {self.name}({', '.join(self.params)})>"


class Queries(Mapping[str, Query]):
    """The queries of one file, by name: ``QUERIES.record_fact`` or ``QUERIES["record_fact"]``.

    Each query is an ordinary attribute of the object, set once here, so ``QUERIES.name``
    in a repository costs what any attribute does; ``__getattr__``, which Python calls
    only after that lookup failed, raising and catching an ``AttributeError`` (about
    1 µs, ``bench/queries.py``), is left for a name the file does not have.
    """

    def __init__(self, origin: str, queries: Mapping[str, Query]) -> None:
        self.origin = origin
        self._queries = dict(queries)
        for name, query in self._queries.items():
            if name in vars(self) or hasattr(type(self), name):
                raise QueryFileError(f"{origin}: {name!r} is taken by the queries object")
            setattr(self, name, query)

    def __getattr__(self, name: str) -> Query:
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self._queries[name]
        except KeyError:
            raise AttributeError(f"{self.origin} has no query named {name!r}") from None

    def __getitem__(self, name: str) -> Query:
        return self._queries[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._queries)

    def __len__(self) -> int:
        return len(self._queries)


def load_queries(package: str | None, file: str = DEFAULT_FILE) -> Queries:
    """The queries of ``file`` in ``package`` (shipped as package data), compiled."""
    if package is None:
        raise ValueError("load_queries needs the package that holds the file")
    text = resources.files(package).joinpath(file).read_text(encoding="utf-8")
    return parse_queries(text, origin=f"{package.replace('.', '/')}/{file}")


def parse_queries(text: str, *, origin: str = "<sql>") -> Queries:
    """Every block of ``text`` compiled; ``QueryFileError`` names the first thing wrong."""
    queries: dict[str, Query] = {}
    for name, line, doc, statement in _blocks(text, origin):
        if name in queries:
            raise QueryFileError(f"{origin}:{line}: the name {name!r} is used twice")
        compiled, params = compile_parameters(statement, where=f"{origin}:{line} ({name})")
        queries[name] = Query(name, doc, compiled, params)
    return Queries(origin, queries)


def compile_parameters(statement: str, *, where: str = "<sql>") -> tuple[str, tuple[str, ...]]:
    """``statement`` with ``:name`` turned into ``$n``, and the names in ``$n`` order."""
    params: dict[str, int] = {}

    def replace(match: re.Match[str]) -> str:
        if match["skip"] is not None:
            return match["skip"]
        if match["positional"] is not None:
            raise QueryFileError(
                f"{where}: {match['positional']} — name the parameter (:name) instead"
            )
        name = match["name"]
        if keyword.iskeyword(name):
            raise QueryFileError(f"{where}: :{name} is a Python keyword; choose another name")
        number = params.setdefault(name, len(params) + 1)
        return f"${number}"

    return _TOKENS.sub(replace, statement), tuple(params)


def _blocks(text: str, origin: str) -> Iterator[tuple[str, int, str, str]]:
    """(name, line number, doc, statement) of every block, in file order."""
    name: str | None = None
    start = 0
    doc: list[str] = []
    body: list[str] = []
    for number, line in enumerate(text.splitlines(), start=1):
        header = _NAME_LINE.match(line.strip())
        if header is not None:
            if name is not None:
                yield _block(name, start, doc, body, origin)
            name, start, doc, body = header["name"], number, [], []
            if not _IDENTIFIER.match(name) or keyword.iskeyword(name):
                raise QueryFileError(
                    f"{origin}:{number}: {name!r} is not a query name (letters, digits, _)"
                )
        elif name is None:
            if line.strip() and not line.strip().startswith("--"):
                raise QueryFileError(f"{origin}:{number}: SQL before the first '-- name:' line")
        elif not body and line.strip().startswith("--"):
            doc.append(line.strip().removeprefix("--").strip())
        elif body or line.strip():
            body.append(line)
    if name is not None:
        yield _block(name, start, doc, body, origin)


def _block(
    name: str, line: int, doc: list[str], body: list[str], origin: str
) -> tuple[str, int, str, str]:
    while body and (not body[-1].strip() or body[-1].strip().startswith("--")):
        body.pop()  # a group's header comment, or blank lines, before the next block
    statement = "\n".join(body).strip().removesuffix(";").rstrip()
    if not any(doc):
        raise QueryFileError(f"{origin}:{line}: {name} needs a comment that says why")
    if not statement:
        raise QueryFileError(f"{origin}:{line}: {name} has no statement")
    return name, line, "\n".join(doc).strip(), statement


def _callers(name: str, text: str, params: tuple[str, ...]) -> dict[str, Callable[..., Any]]:
    """``args`` and the four calls, each a function taking exactly ``params``, keyword-only.

    Made from source once per query, as ``dataclasses`` makes ``__init__``: the names are
    identifiers the parser checked, and CPython's own argument matching then does the
    checking, with no dictionary built per call. ``args`` gives the positional tuple, for
    a caller that needs it (``executemany``, a cursor).
    """
    names = ", ".join(params)
    keywords = f", *, {names}" if params else ""
    values = f", {names}" if params else ""
    # Parameter names start with a letter: _conn and _text are never one of them.
    lines = [
        f"def args({keywords.removeprefix(', ')}):",
        f"    return ({names}{',' if params else ''})",
    ]
    for method in _CALLS:
        lines += [
            f"def {method}(_conn, /{keywords}):",
            f"    return _conn.{method}(_text{values})",
        ]
    namespace: dict[str, Any] = {"_text": text}
    exec(compile("\n".join(lines), f"<query {name}>", "exec"), namespace)  # noqa: S102
    callers: dict[str, Callable[..., Any]] = {}
    for method in ("args", *_CALLS):
        function = namespace[method]
        # A wrong argument's TypeError then names the query: "heartbeat.fetch() missing ...".
        function.__qualname__ = f"{name}.{method}"
        callers[method] = function
    return callers

"""JSON documents written as they are read: a user's export (SPEC §10) of any size.

A document is a tree of plain values, dicts, and *async iterables* — each written as a
JSON array as its items arrive, so a year of a user's activity is never in memory at once.
``keyset_rows`` is the usual such iterable: a query read a page at a time, each page on a
connection of its own, so a slow reader holds no connection and no transaction open
between pages.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterable, AsyncIterator
from datetime import UTC, datetime
from typing import Any

import asyncpg

from pin_sessions.platform.database import Database
from pin_sessions.platform.outbox import to_json_value

# Written out once this much is buffered: few enough writes, little held.
CHUNK_BYTES = 64 * 1024
PAGE_ROWS = 500
# Before every (timestamp, UUID) key.
FIRST_KEY = (datetime.min.replace(tzinfo=UTC), uuid.UUID(int=0))


def _scalar(value: Any) -> str:
    return json.dumps(value, default=to_json_value, allow_nan=False, separators=(",", ":"))


def _streams(value: Any) -> bool:
    """Whether ``value`` holds an async iterable anywhere: else it is encoded in one call.

    Asked of every item, so it avoids the ABC checks ``isinstance`` would make.
    """
    if type(value) is dict:
        return any(_streams(item) for item in value.values())
    return hasattr(value, "__aiter__")


async def _pieces(value: Any) -> AsyncIterator[str]:
    if not _streams(value):
        yield _scalar(value)
    elif isinstance(value, dict):
        yield "{"
        for index, (name, item) in enumerate(value.items()):
            yield ("," if index else "") + _scalar(str(name)) + ":"
            async for piece in _pieces(item):
                yield piece
        yield "}"
    elif isinstance(value, AsyncIterable):
        yield "["
        first = True
        async for item in value:
            if not first:
                yield ","
            first = False
            async for piece in _pieces(item):
                yield piece
        yield "]"


async def stream_json(document: Any) -> AsyncIterator[bytes]:
    """``document`` as UTF-8 JSON, in chunks of about ``CHUNK_BYTES``."""
    buffered: list[str] = []
    size = 0
    async for piece in _pieces(document):
        buffered.append(piece)
        size += len(piece)
        if size >= CHUNK_BYTES:
            yield "".join(buffered).encode()
            buffered, size = [], 0
    if buffered:
        yield "".join(buffered).encode()


async def keyset_rows(
    database: Database,
    query: str,
    *args: Any,
    key: tuple[str, str] = ("created_at", "id"),
    page_rows: int = PAGE_ROWS,
) -> AsyncIterator[asyncpg.Record]:
    """Every row of ``query``, a page at a time, in the order of ``key``.

    ``key`` names a timestamp column and a UUID column that together order the rows and
    tell each apart. ``query`` takes ``*args``, then the key to read after (two parameters),
    then the page size, and orders by the key.
    """
    after: tuple[Any, Any] = FIRST_KEY
    while True:
        async with database.connection() as conn:
            rows = await conn.fetch(query, *args, *after, page_rows)
        for row in rows:
            yield row
        if len(rows) < page_rows:
            return
        last = rows[-1]
        after = (last[key[0]], last[key[1]])

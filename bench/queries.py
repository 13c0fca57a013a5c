"""What a named query costs a call: ``platform/queries.py`` against a plain positional call.

    python bench/queries.py [--calls 200000] [--rounds 5]

For a statement of 2 parameters (the heartbeat's shape) and of 9 (the largest insert), in
one process, alternating A B A B for ``--rounds`` rounds of ``--calls`` calls each:

* ``args``: the loader's keyword → positional step alone (``query.args(**kw)``) against
  building the tuple by hand;
* ``call``: ``await QUERIES.two.fetchval(conn, **kw)``, as a repository writes it (the
  query looked up on the file's object, then called), against ``await conn.fetchval(text,
  a, b)`` on a connection whose ``fetchval`` returns at once, so the difference is the
  loader's share of a call and nothing of the database's.

Times are CPU time of this process (``time.process_time_ns``), which a busy neighbour
does not inflate; each figure is the median over the rounds, in nanoseconds per call.
Prints one JSON object. A heartbeat costs the server tens of microseconds of CPU
(``bench/heartbeat.py``): read the overhead against that.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

from pin_sessions.platform.queries import parse_queries

QUERIES = parse_queries(
    """
-- name: two
-- The heartbeat's shape: an array of ids and an instant.
update t set at = :now where id = any(:ids::uuid[])

-- name: nine
-- The largest insert's shape.
insert into t values (:a, :b, :c, :d, :e, :f, :g, :h, :i)
""",
    origin="bench",
)


class StubConnection:
    """Answers at once: what is left of a call is the caller's own work."""

    async def fetchval(self, query: str, *args: Any) -> None:
        return None


def args_cases() -> dict[str, tuple[Callable[[], Any], Callable[[], Any]]]:
    two, nine = QUERIES.two, QUERIES.nine
    ids, now = ["a"], "now"
    return {
        "2 parameters": (
            lambda: (ids, now),
            lambda: two.args(ids=ids, now=now),
        ),
        "9 parameters": (
            lambda: (1, 2, 3, 4, 5, 6, 7, 8, 9),
            lambda: nine.args(a=1, b=2, c=3, d=4, e=5, f=6, g=7, h=8, i=9),
        ),
    }


def call_cases(
    conn: StubConnection,
) -> dict[str, tuple[Callable[[], Awaitable[Any]], Callable[[], Awaitable[Any]]]]:
    # The named call as a repository writes it, the query looked up on the file's object
    # at each call; the plain one with its text at hand, as a module constant was.
    two, nine = QUERIES.two.text, QUERIES.nine.text
    ids, now = ["a"], "now"
    return {
        "2 parameters": (
            lambda: conn.fetchval(two, ids, now),
            lambda: QUERIES.two.fetchval(conn, ids=ids, now=now),
        ),
        "9 parameters": (
            lambda: conn.fetchval(nine, 1, 2, 3, 4, 5, 6, 7, 8, 9),
            lambda: QUERIES.nine.fetchval(conn, a=1, b=2, c=3, d=4, e=5, f=6, g=7, h=8, i=9),
        ),
    }


def time_sync(work: Callable[[], Any], calls: int) -> float:
    started = time.process_time_ns()
    for _ in range(calls):
        work()
    return (time.process_time_ns() - started) / calls


async def time_async(work: Callable[[], Awaitable[Any]], calls: int) -> float:
    started = time.process_time_ns()
    for _ in range(calls):
        await work()
    return (time.process_time_ns() - started) / calls


def report(plain: list[float], named: list[float]) -> dict[str, float]:
    plain_ns, named_ns = statistics.median(plain), statistics.median(named)
    return {
        "plainNs": round(plain_ns, 1),
        "namedNs": round(named_ns, 1),
        "overheadNs": round(named_ns - plain_ns, 1),
    }


async def run(calls: int, rounds: int) -> dict[str, Any]:
    result: dict[str, Any] = {"calls": calls, "rounds": rounds, "args": {}, "call": {}}
    for case, (plain, named) in args_cases().items():
        times: tuple[list[float], list[float]] = ([], [])
        for _ in range(rounds):
            times[0].append(time_sync(plain, calls))
            times[1].append(time_sync(named, calls))
        result["args"][case] = report(*times)
    conn = StubConnection()
    for case, (plain_call, named_call) in call_cases(conn).items():
        times = ([], [])
        for _ in range(rounds):
            times[0].append(await time_async(plain_call, calls))
            times[1].append(await time_async(named_call, calls))
        result["call"][case] = report(*times)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    print(json.dumps(asyncio.run(run(args.calls, args.rounds)), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

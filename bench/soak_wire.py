"""The soak's HTTP client: HTTP/1.1 keep-alive on raw asyncio streams, and what it records.

The load generator shares the machine's two cores with the service it measures, so its
own cost per request matters: a request here is one prebuilt write and two reads
(headers, then exactly ``Content-Length`` bytes), several times cheaper in CPU than a
general client. It speaks only what the soak needs — a request with a body or none, an
answer with ``Content-Length`` (every answer of the API has one; a streamed export is
read to its end by the ``Transfer-Encoding: chunked`` path).

Every call is recorded: the route's label, when it was sent and answered (seconds since
the run began), the status (or the transport failure) and whether the caller expected a
non-2xx answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# What a call ended as, besides an HTTP status.
TIMEOUT = "timeout"
TRANSPORT = "transport"
# Below uvicorn's default keep-alive timeout (5 s): an older idle connection is not reused.
KEEP_ALIVE_SECONDS = 4.0


@dataclass(frozen=True)
class Answer:
    """One HTTP answer: status, the headers the soak reads, the body."""

    status: int
    content_type: str
    body: bytes
    retry_after: float | None = None  # seconds, from a Retry-After header

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    @property
    def problem_code(self) -> str | None:
        if not self.content_type.startswith("application/problem+json"):
            return None
        with contextlib.suppress(ValueError, AttributeError):
            code = json.loads(self.body).get("code")
            return str(code) if code is not None else None
        return None


@dataclass(frozen=True)
class Record:
    """One call as the report counts it."""

    route: str
    sent: float
    answered: float
    status: int | str  # an HTTP status, or TIMEOUT / TRANSPORT
    expected: bool  # a non-2xx the caller's scenario explains (e.g. 401 after a key rotation)
    problem: bool  # the body was application/problem+json
    code: str | None

    @property
    def latency(self) -> float:
        return self.answered - self.sent


@dataclass
class Recorder:
    """Every call of the run, in the order answered."""

    started: float = field(default_factory=time.monotonic)
    records: list[Record] = field(default_factory=list)
    # (due, how late it was sent) of each scheduled call (a heartbeat): the driver's own
    # lag — a call waiting for a free connection while a freeze holds them all, say.
    lags: list[tuple[float, float]] = field(default_factory=list)

    def now(self) -> float:
        return time.monotonic() - self.started


class CallFailed(Exception):
    """No HTTP answer: a timeout or a broken connection (already recorded)."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


class _Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.idle_since = time.monotonic()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.close()


class Wire:
    """A pool of keep-alive connections to one ``host:port``; ``call`` records each request."""

    def __init__(
        self, host: str, port: int, recorder: Recorder, *, connections: int, timeout: float
    ) -> None:
        self._host = host
        self._port = port
        self._recorder = recorder
        self._timeout = timeout
        self._idle: list[_Connection] = []
        self._slots = asyncio.Semaphore(connections)
        self._host_header = f"{host}:{port}".encode()

    async def call(
        self,
        route: str,
        method: str,
        path: str,
        *,
        headers: dict[str, str] | None = None,
        json_body: Any = None,
        form: bytes | None = None,
        expect: frozenset[int] = frozenset(),
        explain: Callable[[Answer], bool] | None = None,
        due: float | None = None,
    ) -> Answer:
        """Send one request and record it; raises :class:`CallFailed` without an answer.

        A non-2xx answer is recorded as expected when its status is in ``expect`` or
        ``explain(answer)`` says so (judged once answered: what happened meanwhile counts).
        """
        body = b""
        lines = [f"{method} {path} HTTP/1.1".encode(), b"Host: " + self._host_header]
        if json_body is not None:
            body = json.dumps(json_body, separators=(",", ":")).encode()
            lines.append(b"Content-Type: application/json")
        elif form is not None:
            body = form
            lines.append(b"Content-Type: application/x-www-form-urlencoded")
        if body or method in ("POST", "PUT", "DELETE"):
            lines.append(b"Content-Length: " + str(len(body)).encode())
        for name, value in (headers or {}).items():
            lines.append(f"{name}: {value}".encode())
        request = b"\r\n".join(lines) + b"\r\n\r\n" + body
        async with self._slots:
            sent = self._recorder.now()
            if due is not None:
                self._recorder.lags.append((due, sent - due))
            try:
                answer = await asyncio.wait_for(self._exchange(request), self._timeout)
            except (TimeoutError, OSError, asyncio.IncompleteReadError, ValueError) as exc:
                kind = TIMEOUT if isinstance(exc, TimeoutError) else TRANSPORT
                self._record(route, sent, kind, expected=False, answer=None)
                raise CallFailed(kind) from None
        expected = answer.status in expect or (
            not answer.ok and explain is not None and explain(answer)
        )
        self._record(route, sent, answer.status, expected=expected, answer=answer)
        return answer

    def _record(
        self, route: str, sent: float, status: int | str, *, expected: bool, answer: Answer | None
    ) -> None:
        problem = answer is not None and answer.content_type.startswith("application/problem+json")
        code = answer.problem_code if answer is not None and not answer.ok else None
        self._recorder.records.append(
            Record(route, sent, self._recorder.now(), status, expected, problem, code)
        )

    async def _exchange(self, request: bytes) -> Answer:
        connection = self._idle.pop() if self._idle else None
        if connection is not None and time.monotonic() - connection.idle_since > KEEP_ALIVE_SECONDS:
            # The server closes a connection idle this long (uvicorn's keep-alive timeout).
            connection.close()
            connection = None
        if connection is not None:
            try:
                return await self._on(connection, request)
            except (OSError, asyncio.IncompleteReadError):
                # A keep-alive connection the server closed meanwhile (a worker killed, an
                # idle timeout): nothing was answered, so one fresh connection may try.
                connection.close()
        reader, writer = await asyncio.open_connection(self._host, self._port)
        return await self._on(_Connection(reader, writer), request)

    async def _on(self, connection: _Connection, request: bytes) -> Answer:
        try:
            connection.writer.write(request)
            answer, keep = await _read_answer(connection.reader)
        except BaseException:
            connection.close()
            raise
        if keep:
            connection.idle_since = time.monotonic()
            self._idle.append(connection)
        else:
            connection.close()
        return answer

    async def close(self) -> None:
        for connection in self._idle:
            connection.close()
        self._idle.clear()


async def _read_answer(reader: asyncio.StreamReader) -> tuple[Answer, bool]:
    head = await reader.readuntil(b"\r\n\r\n")
    status_line, *header_lines = head[:-4].split(b"\r\n")
    status = int(status_line.split(b" ", 2)[1])
    length = 0
    chunked = False
    keep = True
    content_type = ""
    retry_after = None
    for line in header_lines:
        name, _, value = line.partition(b":")
        lower = name.strip().lower()
        if lower == b"content-length":
            length = int(value)
        elif lower == b"content-type":
            content_type = value.strip().decode("latin-1")
        elif lower == b"transfer-encoding":
            chunked = b"chunked" in value.lower()
        elif lower == b"connection":
            keep = b"close" not in value.lower()
        elif lower == b"retry-after" and value.strip().isdigit():
            retry_after = float(value)
    body = await _read_chunked(reader) if chunked else await reader.readexactly(length)
    return Answer(status, content_type, body, retry_after), keep


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    parts: list[bytes] = []
    while True:
        size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
        if size == 0:
            await reader.readuntil(b"\r\n")
            return b"".join(parts)
        parts.append(await reader.readexactly(size))
        await reader.readexactly(2)

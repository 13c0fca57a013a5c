"""Client authentication at the OAuth endpoints, within the failure limit (SPEC §11).

A service authenticates at ``/oauth/token`` and ``/oauth/introspect`` with its id and
secret (``clients``). Failed authentications — an unknown id, a wrong secret, a disabled
client, credentials that do not parse — are counted per client id and per client address
(the IPv4 address, or an IPv6 client's /64, as the sign-in limits count) over the last
minute, in PostgreSQL (``identity.client_authentication_failures``), so the limit holds
across every API process and instance. The rules:

* An id or an address with ``PIN_OAUTH__FAILURE_LIMIT`` failures in the last minute is
  refused: 429 ``temporarily_unavailable`` with ``Retry-After`` (until the oldest of them
  leaves the minute), whatever the secret — a right one too, or a guesser would learn from
  the answer which guess was right. A refused attempt writes nothing: a guesser held off
  costs one read each.
* Only failures write. The two rows are read by the statement that reads the client, so a
  success costs no round trip more than it did without the limit.
* A failure is one upsert of its two rows, which judges each on the locked row: however many
  arrive at once, on however many processes, no more than the limit are answered 401 in any
  minute; the others get 429, and count as failures like the first ones.
* A right secret is judged on what its own statement read, without a lock: it is refused
  once the limit is reached, but an attempt read just before the limit-th failure committed
  is still judged. So a burst can have its secret compared a little past the limit — as many
  times as attempts were read while the limit was being reached — before every later one is
  refused; a write or lock per attempt on the success path would close that, at the price of
  the cheap success. Against 256-bit secrets it buys a guesser nothing.

Failures are logged at most once a minute per client id in each process (:class:`FailureLog`;
each line says how many it held back), and counted by reason in
``identity_oauth_client_authentication_failures_total``.
"""

from __future__ import annotations

import hmac
import uuid
from collections.abc import Iterable
from datetime import datetime, timedelta
from enum import StrEnum
from typing import NoReturn

import structlog
from prometheus_client import CollectorRegistry, Counter

from pin_sessions.identity import repository
from pin_sessions.identity.clients import (
    STAND_IN_HASH,
    Client,
    ClientState,
    client_of,
    parse_client_id,
    secret_hash,
)
from pin_sessions.identity.domain import ip_network, whole_seconds
from pin_sessions.identity.errors import InvalidClient, TooManyClientFailures
from pin_sessions.platform.database import Database

log = structlog.get_logger(__name__)

# SPEC §11: the limit is so many failures a minute.
FAILURE_WINDOW = timedelta(minutes=1)
LOG_INTERVAL = timedelta(minutes=1)
# Each process deletes rows past the window at most this often, after a failure it recorded.
CLEANUP_INTERVAL = timedelta(minutes=1)
CLEANUP_BATCH = 1000
# Client ids whose last line this process remembers; past it, the longest-quiet are dropped.
MAX_LOGGED_CLIENT_IDS = 4096


class FailureReason(StrEnum):
    UNKNOWN_CLIENT = "unknown client"
    WRONG_SECRET = "wrong secret"  # noqa: S105 - a reason, not a secret
    DISABLED = "disabled"
    MALFORMED = "malformed credentials"
    TOO_MANY_FAILURES = "too many failures"

    @property
    def label(self) -> str:
        return self.value.replace(" ", "_")


def limit_edge(failed_at: list[datetime] | None, limit: int, now: datetime) -> datetime | None:
    """The ``limit``-th newest failure of the last minute; None while there are fewer.

    While there is one, the limit is reached; it leaving the minute frees a failure.
    """
    recent = sorted(at for at in failed_at or () if at > now - FAILURE_WINDOW)
    return recent[-limit] if len(recent) >= limit else None


def wait_seconds(edges: Iterable[datetime | None], now: datetime) -> int | None:
    """Whole seconds until every limit allows a failure again; None when all do now."""
    reached = [edge for edge in edges if edge is not None]
    if not reached:
        return None
    # Never more than the window: another process's clock may stand a little ahead.
    longest = max(whole_seconds(edge + FAILURE_WINDOW - now) for edge in reached)
    return min(longest, whole_seconds(FAILURE_WINDOW))


class ClientAuthentication:
    """Authenticates OAuth clients, and counts and limits their failures."""

    def __init__(self, database: Database, failure_limit: int, registry: CollectorRegistry) -> None:
        self._database = database
        self._limit = failure_limit
        self._log = FailureLog()
        # When this process last deleted rows past the window (the injected clock's time).
        self._cleaned_at: datetime | None = None
        self._failures = Counter(
            "identity_oauth_client_authentication_failures_total",
            "Failed client authentications at the OAuth endpoints, refusals past the limit "
            "included (reason too_many_failures)",
            ["reason"],
            registry=registry,
        )
        for reason in FailureReason:
            self._failures.labels(reason.label)

    async def authenticate(
        self, client_id: str, secret: str, client_ip: str | None, now: datetime
    ) -> Client:
        """The Active client ``client_id`` names, if ``secret`` is its and no limit refuses.

        InvalidClient (401) for bad credentials; TooManyClientFailures (429) past a limit.
        """
        parsed, network = parse_client_id(client_id), ip_network(client_ip)
        client_key, address_key = _keys(parsed, network)
        async with self._database.connection() as conn:
            row = await repository.client_credentials(conn, parsed, client_key, address_key)
        edges = (
            limit_edge(row["client_failures"], self._limit, now),
            limit_edge(row["address_failures"], self._limit, now),
        )
        wait = wait_seconds(edges, now)
        if wait is not None:
            self._refused(parsed, now, wait)
        # Compared also when the client is unknown, so that path costs what a wrong secret does.
        matches = hmac.compare_digest(secret_hash(secret), row["secret_hash"] or STAND_IN_HASH)
        if row["client_id"] is None:
            await self._fail(parsed, network, FailureReason.UNKNOWN_CLIENT, now)
        if not matches:
            await self._fail(parsed, network, FailureReason.WRONG_SECRET, now)
        if row["status"] != ClientState.ACTIVE:
            await self._fail(parsed, network, FailureReason.DISABLED, now)
        return client_of(row)

    async def refuse_malformed(
        self, client_id: str | None, client_ip: str | None, now: datetime
    ) -> NoReturn:
        """Credentials missing or unreadable: a failure like a wrong secret, counted alike."""
        parsed = None if client_id is None else parse_client_id(client_id)
        await self._fail(parsed, ip_network(client_ip), FailureReason.MALFORMED, now)

    async def _fail(
        self, client_id: uuid.UUID | None, network: str | None, reason: FailureReason, now: datetime
    ) -> NoReturn:
        """Record the failure: 401, or 429 when a limit was reached before it."""
        keys = [key for key in _keys(client_id, network) if key is not None]
        async with self._database.connection() as conn:
            rows = await repository.record_authentication_failure(
                conn, keys, now, now - FAILURE_WINDOW, self._limit
            )
            if self._cleaned_at is None or abs(now - self._cleaned_at) >= CLEANUP_INTERVAL:
                self._cleaned_at = now
                await repository.delete_expired_authentication_failures(
                    conn, now - FAILURE_WINDOW, CLEANUP_BATCH
                )
        refused = [
            limit_edge(row["failed_at"], self._limit, now) for row in rows if row["last_refused"]
        ]
        if refused:
            self._refused(client_id, now, wait_seconds(refused, now) or 1)
        self._failures.labels(reason.label).inc()
        self._log.failed(client_id, reason, now)
        raise InvalidClient("client authentication failed")

    def _refused(self, client_id: uuid.UUID | None, now: datetime, wait: int) -> NoReturn:
        reason = FailureReason.TOO_MANY_FAILURES
        self._failures.labels(reason.label).inc()
        self._log.failed(client_id, reason, now)
        raise TooManyClientFailures(wait)


def _keys(client_id: uuid.UUID | None, network: str | None) -> tuple[str | None, str | None]:
    """The rows a failure counts in: its client id's, then its address's (None: not counted)."""
    return (
        None if client_id is None else f"client:{client_id}",
        None if network is None else f"address:{network}",
    )


class FailureLog:
    """Failed authentications, logged at most once per ``interval`` per client id.

    Per process: the line that ends a quiet spell says how many failures of that id it held
    back (``suppressed``). The id only when it is one (the input may be anything), never
    the secret; ids that are not UUIDs share one entry.
    """

    def __init__(
        self, interval: timedelta = LOG_INTERVAL, max_ids: int = MAX_LOGGED_CLIENT_IDS
    ) -> None:
        self._interval = interval
        self._max_ids = max_ids
        # client id → (when its last line was written, failures held back since)
        self._entries: dict[uuid.UUID | None, tuple[datetime, int]] = {}

    def __len__(self) -> int:
        """How many client ids this process remembers a line for."""
        return len(self._entries)

    def failed(self, client_id: uuid.UUID | None, reason: FailureReason, now: datetime) -> None:
        entry = self._entries.pop(client_id, None)
        if entry is not None and self._quiet(entry[0], now):
            self._entries[client_id] = (entry[0], entry[1] + 1)
            return
        self._make_room(now)
        self._entries[client_id] = (now, 0)
        log.warning(
            "client authentication failed",
            clientId=None if client_id is None else str(client_id),
            reason=reason.value,
            suppressed=0 if entry is None else entry[1],
        )

    def _quiet(self, logged_at: datetime, now: datetime) -> bool:
        """Within the interval of the last line: on either side of it, since requests read
        the clock when they arrive and may fail in another order."""
        return abs(now - logged_at) < self._interval

    def _make_room(self, now: datetime) -> None:
        if len(self._entries) < self._max_ids:
            return
        for client_id, (logged_at, _) in list(self._entries.items()):
            if not self._quiet(logged_at, now):
                del self._entries[client_id]
        while len(self._entries) >= self._max_ids:
            # The entry written longest ago: dicts keep the order entries were (re)written.
            del self._entries[next(iter(self._entries))]

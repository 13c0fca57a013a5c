"""What an ``Idempotency-Key`` means to user-activity (SPEC §8).

A device's key is reserved in the transaction that records the action or view, before
anything is recorded, and the answer is stored with it before that transaction commits. A
repeat with the same key from the same device within ``KEY_LIFETIME`` records nothing and gets
the first answer; a repeat racing the first waits on the reserved row, then does the same
(``reserve_idempotency_key`` in ``queries.sql``). The same key with another request is
refused, as the draft asks, rather than answered with an answer to something else.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from pin_sessions.platform.database import Connection
from pin_sessions.user_activity import repository
from pin_sessions.user_activity.errors import IdempotencyKeyReused

KEY_LIFETIME = timedelta(hours=24)


def request_hash(operation: str, body: str) -> bytes:
    """What makes two requests "the same": the operation and its validated body."""
    return hashlib.sha256(f"{operation}\n{body}".encode()).digest()


async def first_answer(
    conn: Connection, anonymous_id: uuid.UUID, key: str, fingerprint: bytes, now: datetime
) -> Mapping[str, Any] | None:
    """Reserve ``key`` for this request (None: go on and record), or the first answer to it."""
    if await repository.reserve_idempotency_key(
        conn, anonymous_id, key, fingerprint, now, expired_before=now - KEY_LIFETIME
    ):
        return None
    row = await repository.idempotency_key(conn, anonymous_id, key)
    assert row is not None and row["response"] is not None  # committed with its answer
    if bytes(row["request_hash"]) != fingerprint:
        raise IdempotencyKeyReused()
    answer: Mapping[str, Any] = row["response"]
    return answer


async def remember(
    conn: Connection, anonymous_id: uuid.UUID, key: str, answer: Mapping[str, Any]
) -> None:
    """Keep the answer with the reserved key, in the transaction that reserved it."""
    await repository.remember_idempotent_response(conn, anonymous_id, key, answer)

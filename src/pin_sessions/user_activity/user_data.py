"""A user's data in user-activity: export and erasure (SPEC §10).

Erasure arrives as ``pin.identity.user-erased.v1`` (``consumers.UserErasedConsumer``). It
first writes the tombstone and deletes the user's Active sessions with their actions and
views, in one short transaction under the user's exclusive lock (``platform.erasure``): an
Active session is deleted, never closed, since only the closer and a link close a session
and a deleted one publishes nothing. Then it deletes the rest of the user's actions, views
and sessions in bounded batches, each its own transaction, so a heavy user never holds
many locks for long. Every writer of a user's rows takes the shared lock and asks
``refuse_erased`` first, so once the tombstone is there nothing links to the user again.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Mapping
from datetime import datetime
from functools import partial
from typing import Any

from pin_sessions.platform.auth_errors import SessionNotActive
from pin_sessions.platform.batching import in_transaction, until_short
from pin_sessions.platform.database import Connection, Database
from pin_sessions.platform.logging import mask_ip
from pin_sessions.user_activity import repository
from pin_sessions.user_activity.domain import open_or_duration_seconds
from pin_sessions.user_activity.errors import UserErased


async def is_erased(conn: Connection, user_id: uuid.UUID) -> bool:
    """Whether the user is erased, holding the user's shared lock until the transaction ends.

    Run it in the transaction that then writes the user's id: an erasure that is writing
    its tombstone now is waited for, one that comes later waits for this transaction.
    """
    return await repository.TOMBSTONES.is_erased(conn, user_id)


async def refuse_erased(conn: Connection, user_id: uuid.UUID | None) -> None:
    """A request's guard: an erased user's token, still unexpired, writes nothing.

    Its session is gone with the user, so the answer is the one a token of an ended session
    gets (the check of the token may have passed just before the erasure committed).
    """
    if user_id is not None and await is_erased(conn, user_id):
        raise SessionNotActive("this user has been erased")


async def erase_user(
    database: Database, user_id: uuid.UUID, now: datetime, *, batch_size: int
) -> int:
    """Tombstone, then delete everything of the user; returns the rows deleted.

    Safe to run again, and to run beside any request or job: a second run finds the
    tombstone in place and nothing left to delete.
    """
    async with database.transaction() as conn:
        await repository.TOMBSTONES.bury(conn, user_id, now)
        deleted = await repository.delete_erased_user_active_sessions(conn, user_id)
    for delete in repository.ERASURE_DELETES:
        batch = partial(
            repository.delete_erased_user_rows,
            delete=delete,
            user_id=user_id,
            batch_size=batch_size,
        )
        deleted += (await until_short(in_transaction(database, batch), size=batch_size)).rows
    return deleted


class ActivityData:
    """The export of a user's sessions, views and actions."""

    def __init__(self, database: Database) -> None:
        self._database = database

    async def export(self, user_id: uuid.UUID, now: datetime) -> Mapping[str, Any]:
        """The user's document, read while it is written; ``UserErased`` before anything."""
        async with self._database.connection() as conn:
            if await repository.TOMBSTONES.was_erased(conn, user_id):
                raise UserErased()
        return {"userId": user_id, "exportedAt": now, "sessions": self._sessions(user_id)}

    async def _sessions(self, user_id: uuid.UUID) -> AsyncIterator[dict[str, Any]]:
        async for row in repository.sessions_of(self._database, user_id):
            yield {
                "sessionId": row["id"],
                "anonymousId": row["anonymous_id"],
                "status": row["status"],
                "createdAt": row["created_at"],
                "lastActivityAt": row["last_activity_at"],
                "linkedAt": row["linked_at"],
                "endedAt": row["ended_at"],
                "durationSeconds": open_or_duration_seconds(row["duration"]),
                "device": {
                    "type": row["device_type"],
                    "os": row["device_os"],
                    "browser": row["device_browser"],
                    "userAgent": row["device_user_agent"],
                    "ipAddress": None if row["device_ip"] is None else mask_ip(row["device_ip"]),
                },
                "propertyViews": self._views(row["id"]),
                "actions": self._actions(row["id"]),
            }

    async def _views(self, session_id: uuid.UUID) -> AsyncIterator[dict[str, Any]]:
        async for row in repository.views_of(self._database, session_id):
            yield {
                "viewId": row["id"],
                "propertyObjectId": row["property_object_id"],
                "startedAt": row["started_at"],
                "endedAt": row["ended_at"],
                "durationSeconds": open_or_duration_seconds(row["duration"]),
            }

    async def _actions(self, session_id: uuid.UUID) -> AsyncIterator[dict[str, Any]]:
        async for row in repository.actions_of(self._database, session_id):
            yield {
                "actionId": row["id"],
                "type": row["type"],
                "propertyObjectId": row["property_object_id"],
                "data": row["data"],
                "createdAt": row["created_at"],
            }

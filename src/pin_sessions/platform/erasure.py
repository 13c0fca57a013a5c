"""What every context that holds a user's data does when the user is erased (SPEC §10).

Identity erases the user and publishes ``pin.identity.user-erased.v1``; every other context
consumes it, deletes or anonymises its own rows, and keeps a *tombstone*: the user id's
SHA-256 digest, so that a request or an event that was already under way — a sign-in event
delivered late, a request that passed its token check just before — cannot write the id
again, while a scan of the context's tables for the id finds nothing.

A tombstone alone leaves a race: a writer that read "not erased" before the tombstone
committed could write after the erasure swept the rows. So writers of a user's rows take
a shared transaction-level advisory lock on the user, and the erasure takes it exclusively
while it writes the tombstone: every writer either commits before (and its rows are swept)
or reads the tombstone after. Each context names its own lock class, so contexts never wait
for one another.

:class:`Tombstones` is that mechanism, once: a context gives it its lock class and the two
statements over its own tombstone table (contexts never read each other's tables), and asks
it ``is_erased`` (in the writer's transaction) and ``bury`` (in the erasure's). The bulk of
an erasure then runs as bounded batches (``platform.batching.until_short``), each its own
transaction, so a heavy user never holds many locks for long.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pin_sessions.platform.database import Connection
    from pin_sessions.platform.queries import Query

USER_ERASED_TOPIC = "pin.identity.user-erased.v1"


def user_digest(user_id: uuid.UUID) -> bytes:
    """The tombstone's key: not the id, and the same for the same id in every context."""
    return hashlib.sha256(user_id.bytes).digest()


# $1: the context's lock class, $2: the user id. Both held until the transaction ends.
LOCK_USER_SHARED = "select pg_advisory_xact_lock_shared($1::int, hashtext($2::text))"
LOCK_USER_EXCLUSIVE = "select pg_advisory_xact_lock($1::int, hashtext($2::text))"

# Messages a context's consumers parked that name the user (payload ``UserId``), given the
# consumers' names: the context's erasure removes them with the rest.
DELETE_DEAD_LETTERS_OF_USER = """
delete from messaging.dead_letters
where consumer = any($1::text[]) and payload ->> 'UserId' = $2::text
"""


@dataclass(frozen=True)
class Tombstones:
    """A context's erased users: its lock class and its tombstone table's two statements.

    ``select_erased`` takes ``user_digest`` and answers whether it is there;
    ``insert_erased`` takes ``user_digest`` and ``erased_at`` and does nothing when it is.
    """

    lock_class: int
    select_erased: Query
    insert_erased: Query

    async def is_erased(self, conn: Connection, user_id: uuid.UUID) -> bool:
        """Whether the user is erased, holding the user's shared lock until the transaction ends.

        Run it in the transaction that then writes the user's id: an erasure that is writing
        its tombstone now is waited for, one that comes later waits for this transaction.
        """
        await conn.execute(LOCK_USER_SHARED, self.lock_class, str(user_id))
        return await self.was_erased(conn, user_id)

    async def was_erased(self, conn: Connection, user_id: uuid.UUID) -> bool:
        """Whether the tombstone is there, without the lock: for a reader that writes nothing."""
        erased: bool = await self.select_erased.fetchval(conn, user_digest=user_digest(user_id))
        return erased

    async def bury(self, conn: Connection, user_id: uuid.UUID, now: datetime) -> None:
        """Write the tombstone under the user's exclusive lock, held until the transaction ends.

        Every writer that read "not erased" has committed by then (its rows are swept after
        this), and every later one reads the tombstone. Repeatable.
        """
        await conn.execute(LOCK_USER_EXCLUSIVE, self.lock_class, str(user_id))
        await self.insert_erased.execute(conn, user_digest=user_digest(user_id), erased_at=now)


async def delete_dead_letters_of_user(
    conn: Connection, consumers: Sequence[str], user_id: str
) -> None:
    """What ``consumers`` parked about the user (payload ``UserId``) goes with the rest."""
    await conn.execute(DELETE_DEAD_LETTERS_OF_USER, list(consumers), user_id)

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
"""

from __future__ import annotations

import hashlib
import uuid

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

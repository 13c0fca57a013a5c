"""Signed-in users for tests of contexts other than identity.

Writes a user and an Active refresh session straight into identity's tables and
mints an access token for it, so a test can call user routes without the SMS
sign-in dance. Identity's own tests sign in through the API instead.
"""

from __future__ import annotations

import hashlib
import secrets
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from pin_sessions.identity.signing import TokenSigner
from pin_sessions.platform.database import Connection
from pin_sessions.platform.ids import new_id

INSERT_USER = """
insert into identity.users (id, phone_number, created_at) values ($1, $2, $3)
"""

INSERT_SESSION = """
insert into identity.refresh_sessions
    (id, user_id, family_id, token_hash, status, created_at, expires_at, last_used_at,
     device_user_agent, signed_in_at)
values ($1, $2, $1, $3, 'Active', $4, $5, $4, 'tests', $4)
"""


@dataclass(frozen=True)
class SignedInUser:
    user_id: uuid.UUID
    session_id: uuid.UUID
    access_token: str

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.access_token}"}


async def signed_in_user(
    conn: Connection,
    signer: TokenSigner,
    *,
    now: datetime,
    permissions: Iterable[str] = (),
    user_id: uuid.UUID | None = None,
) -> SignedInUser:
    """A sign-in at ``now``: of a new user, or another one (a new family) of ``user_id``."""
    session_id = new_id()
    if user_id is None:
        user_id = new_id()
        phone = "+1555" + str(secrets.randbelow(10**7)).zfill(7)
        await conn.execute(INSERT_USER, user_id, phone, now)
    token_hash = hashlib.sha256(secrets.token_bytes(32)).digest()
    await conn.execute(
        INSERT_SESSION, session_id, user_id, token_hash, now, now + timedelta(days=30)
    )
    access = await signer.access_token(
        conn, user_id, session_id, now=now, auth_time=now, permissions=permissions
    )
    return SignedInUser(user_id, session_id, access.token)

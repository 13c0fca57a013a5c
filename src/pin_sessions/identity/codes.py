"""Sign-in codes out of the service: the :class:`CodeSender` port (its SMS implementation
is in :mod:`pin_sessions.identity.sms`) and the derivable codes of a dev server
(PIN_DEV_CODES=1)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Protocol

from pin_sessions.identity import domain, repository
from pin_sessions.platform.database import Database

# The server secret's key for dev codes; never the key of the codes' HMACs.
DEV_CODE_KEY_PURPOSE = "dev-sign-in-code"


class CodeSender(Protocol):
    async def send(
        self, request_id: uuid.UUID, phone_number: str, code: str, now: datetime
    ) -> None:
        """Hand ``code`` for ``phone_number`` to the gateway; called after the request is
        committed. Raises ``CodeDeliveryFailed`` when the gateway did not take it."""
        ...


class DevCodes:
    """PIN_DEV_CODES=1 only: codes that ``GET /dev/sign-in-codes/{requestId}`` can show.

    SPEC §3: the code itself is never stored. So a dev server does not draw codes at
    random: each is derived from its request id under a key of the server secret, and
    the endpoint derives it again. Anyone holding the secret could do the same, which on
    a dev server is what the endpoint is for; production draws from the CSPRNG.
    """

    def __init__(self, database: Database, key: bytes) -> None:
        self._database = database
        self._key = key

    def issue(self, request_id: uuid.UUID) -> str:
        return domain.derived_code(self._key, request_id)

    async def code(self, request_id: uuid.UUID) -> str | None:
        """The code of a sign-in request; None when there is no such request."""
        async with self._database.connection() as conn:
            if not await repository.request_exists(conn, request_id):
                return None
        return self.issue(request_id)

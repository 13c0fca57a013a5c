"""Delivering sign-in codes: the :class:`CodeSender` port and its implementations."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Protocol

import structlog

from pin_sessions.identity import repository
from pin_sessions.platform.database import Database

log = structlog.get_logger(__name__)


class CodeSender(Protocol):
    async def send(self, request_id: uuid.UUID, phone_number: str, code: str) -> None:
        """Deliver ``code`` to ``phone_number``; called after the request is committed."""
        ...


class LoggingCodeSender:
    """The default until an SMS gateway is wired: records that a code went out, nothing more."""

    async def send(self, request_id: uuid.UUID, phone_number: str, code: str) -> None:
        # Neither the code nor the phone number: a log line is not a delivery channel.
        log.info("sign-in code sent", requestId=str(request_id))


class DevCodeStore:
    """Keeps codes readable at ``GET /dev/sign-in-codes/{requestId}`` (PIN_DEV_CODES=1 only)."""

    def __init__(self, database: Database) -> None:
        self._database = database

    async def send(self, request_id: uuid.UUID, phone_number: str, code: str) -> None:
        async with self._database.connection() as conn:
            await repository.insert_dev_code(conn, request_id, code)

    async def code(self, request_id: uuid.UUID) -> str | None:
        async with self._database.connection() as conn:
            return await repository.dev_code(conn, request_id)


class FanOutCodeSender:
    """Hands every code to each sender in turn."""

    def __init__(self, senders: Sequence[CodeSender]) -> None:
        self._senders = tuple(senders)

    async def send(self, request_id: uuid.UUID, phone_number: str, code: str) -> None:
        for sender in self._senders:
            await sender.send(request_id, phone_number, code)

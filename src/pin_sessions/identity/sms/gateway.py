"""What every SMS gateway is to the sender: a name and a way to hand over one message."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol


@dataclass(frozen=True)
class Sms:
    """One message: ``to`` in E.164, the ``text`` to show, the sign-in request it belongs to."""

    to: str
    text: str
    request_id: uuid.UUID
    at: datetime


class SmsGateway(Protocol):
    """Hands a message to a provider; ``DeliveryFailed`` when the provider did not take it."""

    @property
    def name(self) -> str:
        """The ``provider`` label of the metrics: log, webhook, twilio or smsru."""
        ...

    async def deliver(self, sms: Sms) -> None: ...


class LogGateway:
    """``PIN_SMS__PROVIDER=log``, development only: delivers nothing.

    The sender's own "sign-in code sent" line is all there is: with ``PIN_ENV=dev`` it shows
    the code (the sender's :class:`~pin_sessions.identity.sms.sender.DevelopmentPhone`),
    never the number.
    """

    name = "log"

    async def deliver(self, sms: Sms) -> None:
        del sms

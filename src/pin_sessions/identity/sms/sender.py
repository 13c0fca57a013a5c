"""The :class:`~pin_sessions.identity.codes.CodeSender`: the code in the configured text,
through one gateway, counted and timed.

The code is logged in one setup only: ``PIN_ENV=dev`` with the ``log`` gateway, where the
log is the developer's phone (:class:`DevelopmentPhone`). Every real gateway's code, and
any code in prod, never reaches a log line.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from datetime import datetime

import structlog
from prometheus_client import CollectorRegistry, Counter, Histogram

from pin_sessions.identity.errors import CodeDeliveryFailed
from pin_sessions.identity.sms.client import DeliveryFailed
from pin_sessions.identity.sms.gateway import Sms, SmsGateway
from pin_sessions.platform.phone_numbers import masked_phone_number
from pin_sessions.settings import CODE_PLACEHOLDER

log = structlog.get_logger(__name__)

SENT = "sent"
FAILED = "failed"


def compose(template: str, code: str, webotp_domain: str | None) -> str:
    """The message: the template with its ``{code}``, then the WebOTP line when configured.

    WebOTP (the origin-bound one-time code format) wants ``@domain #code`` as the last line;
    a browser on that domain then offers the code itself.
    """
    text = template.replace(CODE_PLACEHOLDER, code)
    if webotp_domain is not None:
        text = f"{text}\n\n@{webotp_domain} #{code}"
    return text


# Where a dev server shows a request's code again (identity.http's development route).
DEV_CODE_PATH = "/dev/sign-in-codes/{request_id}"


@dataclass(frozen=True)
class DevelopmentPhone:
    """``PIN_ENV=dev`` with the ``log`` gateway, which sends nothing: its line of a sent code
    shows the code, and the page showing it again when ``PIN_DEV_CODES=1`` serves that page."""

    public_url: str
    dev_codes: bool

    def shows(self, request_id: uuid.UUID, code: str) -> dict[str, str]:
        """The fields the sent code's log line gains.

        Not under ``code``: the logs drop any value under that key, a guard against logging
        a code by accident, and this one is logged on purpose.
        """
        shown = {"devCode": code}
        if self.dev_codes:
            shown["devCodeUrl"] = self.public_url + DEV_CODE_PATH.format(request_id=request_id)
        return shown


@dataclass(frozen=True)
class SmsMetrics:
    sent: Counter
    duration: Histogram

    @classmethod
    def register(cls, registry: CollectorRegistry) -> SmsMetrics:
        return cls(
            sent=Counter(
                "identity_sms_sent_total",
                "Sign-in codes handed to the SMS gateway (sent) or not taken by it (failed)",
                ["provider", "outcome"],
                registry=registry,
            ),
            duration=Histogram(
                "identity_sms_send_duration_seconds",
                "Time to hand one sign-in code to the SMS gateway, retry included",
                registry=registry,
                buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 7.5, 10),
            ),
        )


class SmsCodeSender:
    def __init__(
        self,
        gateway: SmsGateway,
        metrics: SmsMetrics,
        *,
        template: str,
        webotp_domain: str | None = None,
        development_phone: DevelopmentPhone | None = None,
    ) -> None:
        self._gateway = gateway
        self._metrics = metrics
        self._template = template
        self._webotp_domain = webotp_domain
        self._development_phone = development_phone
        # Both series exist from the start, so a failure ratio has a denominator at once.
        for outcome in (SENT, FAILED):
            metrics.sent.labels(gateway.name, outcome)

    async def send(
        self, request_id: uuid.UUID, phone_number: str, code: str, now: datetime
    ) -> None:
        text = compose(self._template, code, self._webotp_domain)
        started = time.perf_counter()
        try:
            await self._gateway.deliver(Sms(phone_number, text, request_id, now))
        except DeliveryFailed as exc:
            self._measure(FAILED, started)
            log.warning(
                "sign-in code not delivered",
                provider=self._gateway.name,
                requestId=str(request_id),
                phoneMasked=masked_phone_number(phone_number),
                reason=exc.reason,
            )
            raise CodeDeliveryFailed() from exc
        seconds = self._measure(SENT, started)
        phone = self._development_phone
        log.info(
            "sign-in code sent",
            provider=self._gateway.name,
            requestId=str(request_id),
            durationMs=round(seconds * 1000),
            **({} if phone is None else phone.shows(request_id, code)),
        )

    def _measure(self, outcome: str, started: float) -> float:
        seconds = time.perf_counter() - started
        self._metrics.sent.labels(self._gateway.name, outcome).inc()
        self._metrics.duration.observe(seconds)
        return seconds

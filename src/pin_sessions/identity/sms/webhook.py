"""``PIN_SMS__PROVIDER=webhook``: the code goes to the company's own gateway, signed (SPEC §8).

The request: ``POST PIN_SMS__WEBHOOK_URL`` with the JSON body ``{"to", "text", "requestId"}``
and two headers, ``X-Pin-Timestamp`` (Unix seconds) and ``X-Pin-Signature:
sha256=<hex>``, the HMAC-SHA256 under ``PIN_SMS__WEBHOOK_SECRET`` of the timestamp, a dot
and the body exactly as sent. A receiver recomputes it over the raw body and refuses a
stale timestamp, so a captured request cannot be replayed later. Any 2xx answer means the
gateway took the message; its body is not read for meaning.
"""

from __future__ import annotations

import hashlib
import hmac
import json

from pin_sessions.identity.sms.client import DeliveryFailed, GatewayClient
from pin_sessions.identity.sms.gateway import Sms

SIGNATURE_HEADER = "X-Pin-Signature"
TIMESTAMP_HEADER = "X-Pin-Timestamp"


def signature(secret: bytes, timestamp: str, body: bytes) -> str:
    """The ``X-Pin-Signature`` value of ``body`` sent at ``timestamp``."""
    digest = hmac.new(secret, timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    return f"sha256={digest}"


class WebhookGateway:
    name = "webhook"

    def __init__(self, client: GatewayClient, url: str, secret: bytes) -> None:
        self._client = client
        self._url = url
        self._secret = secret

    async def deliver(self, sms: Sms) -> None:
        body = json.dumps(
            {"to": sms.to, "text": sms.text, "requestId": str(sms.request_id)},
            separators=(",", ":"),
            ensure_ascii=False,
        ).encode()
        timestamp = str(int(sms.at.timestamp()))
        answer = await self._client.post(
            self._url,
            content=body,
            headers={
                "Content-Type": "application/json",
                TIMESTAMP_HEADER: timestamp,
                SIGNATURE_HEADER: signature(self._secret, timestamp, body),
            },
        )
        if not answer.ok:
            raise DeliveryFailed(f"status {answer.status}")

"""``PIN_SMS__PROVIDER=smsru``: SMS.ru's HTTP API.

What this relies on, from SMS.ru's API documentation (method ``sms/send``):
``POST {base}/sms/send`` with the form fields ``api_id``, ``to`` (the number's digits, no
``+``), ``msg`` and ``json=1`` — form fields rather than the query string, so neither the
key nor the text sits in a URL that a proxy might log. The answer is HTTP 200 whatever
happened, with JSON ``{"status", "status_code", "sms": {"<to>": {"status", "status_code",
"sms_id"}}, "balance"}``: ``"OK"`` (code 100) at the top and for the number means the
message was accepted; ``"ERROR"`` comes with a numeric ``status_code`` (logged) and a
``status_text`` (not logged: free text).
"""

from __future__ import annotations

from typing import Any

from pin_sessions.identity.sms.client import DeliveryFailed, GatewayClient
from pin_sessions.identity.sms.gateway import Sms


class SmsRuGateway:
    name = "smsru"

    def __init__(self, client: GatewayClient, base_url: str, *, api_id: str) -> None:
        self._client = client
        self._url = f"{base_url}/sms/send"
        self._api_id = api_id

    async def deliver(self, sms: Sms) -> None:
        to = sms.to.removeprefix("+")
        answer = await self._client.post(
            self._url, data={"api_id": self._api_id, "to": to, "msg": sms.text, "json": "1"}
        )
        if not answer.ok:
            raise DeliveryFailed(f"status {answer.status}")
        reply = answer.json_object()
        _accepted(reply, "the request")
        per_number = reply.get("sms")
        _accepted(per_number.get(to) if isinstance(per_number, dict) else None, "the number")


def _accepted(part: Any, what: str) -> None:
    if not isinstance(part, dict):
        raise DeliveryFailed(f"no status for {what}")
    if part.get("status") != "OK":
        code = part.get("status_code")
        shown = code if isinstance(code, int) and not isinstance(code, bool) else "unknown"
        raise DeliveryFailed(f"{what} refused, status_code {shown}")

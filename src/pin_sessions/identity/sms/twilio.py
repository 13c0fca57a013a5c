"""``PIN_SMS__PROVIDER=twilio``: Twilio's Programmable Messaging REST API.

What this relies on, from Twilio's API reference (Message resource, "Create a Message"):
``POST {base}/2010-04-01/Accounts/{AccountSid}/Messages.json``, form-encoded ``To`` (E.164),
``From`` (a Twilio number or alphanumeric sender) and ``Body``; HTTP Basic authentication
with the Account SID and the Auth Token; ``201 Created`` with the Message resource as JSON,
whose ``sid`` (``SM…``) names the accepted message. Errors are JSON ``{code, message,
more_info, status}``; only the numeric ``code`` is logged, since ``message`` may quote the
number.
"""

from __future__ import annotations

from urllib.parse import quote

from pin_sessions.identity.sms.client import DeliveryFailed, GatewayClient, parsed_json
from pin_sessions.identity.sms.gateway import Sms

API_VERSION = "2010-04-01"


class TwilioGateway:
    name = "twilio"

    def __init__(
        self,
        client: GatewayClient,
        base_url: str,
        *,
        account_sid: str,
        auth_token: str,
        sender: str,
    ) -> None:
        self._client = client
        self._url = f"{base_url}/{API_VERSION}/Accounts/{quote(account_sid, safe='')}/Messages.json"
        self._auth = (account_sid, auth_token)
        self._sender = sender

    async def deliver(self, sms: Sms) -> None:
        answer = await self._client.post(
            self._url, data={"To": sms.to, "From": self._sender, "Body": sms.text}, auth=self._auth
        )
        if not answer.ok:
            code = _error_code(answer.body)
            raise DeliveryFailed(f"status {answer.status}" + (f", code {code}" if code else ""))
        message = answer.json_object()
        if not isinstance(message.get("sid"), str) or not message["sid"]:
            raise DeliveryFailed(f"status {answer.status} without a message sid")


def _error_code(body: bytes) -> int | None:
    """Twilio's numeric error code, when the body is the documented error object."""
    error = parsed_json(body)
    code = error.get("code") if isinstance(error, dict) else None
    return code if isinstance(code, int) and not isinstance(code, bool) else None

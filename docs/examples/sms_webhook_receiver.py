"""A receiver for PIN Sessions' SMS webhook (PIN_SMS__PROVIDER=webhook), standard library only.

It checks that a request really comes from PIN Sessions — the HMAC-SHA256 of
``<X-Pin-Timestamp>.<raw body>`` under the shared secret, compared in constant time, and a
timestamp no more than 5 minutes off — and only then hands the message to ``send_sms``,
which is where your own SMS backend goes. It answers 204 when the message is taken, 401
when the signature or the timestamp is wrong, and 5xx when the backend fails (PIN Sessions
then retries once at once, with the same body and ``requestId``).

    PIN_SMS_WEBHOOK_SECRET=... python sms_webhook_receiver.py 8080

and on the PIN Sessions side:

    PIN_SMS__PROVIDER=webhook
    PIN_SMS__WEBHOOK_URL=https://sms-gateway.internal/pin   (where this listens, behind TLS)
    PIN_SMS__WEBHOOK_SECRET=...                              (the same secret)
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SECRET = os.environ["PIN_SMS_WEBHOOK_SECRET"].encode()
MAX_CLOCK_SKEW_SECONDS = 300  # older requests may be replays; newer ones are forged
MAX_BODY_BYTES = 16 * 1024


def signature_is_valid(timestamp: str, signature: str, body: bytes, now: float) -> bool:
    """True when ``signature`` is PIN Sessions' over this very body, sent about ``now``."""
    if not timestamp.isdigit() or abs(now - int(timestamp)) > MAX_CLOCK_SKEW_SECONDS:
        return False
    signed = timestamp.encode() + b"." + body
    expected = "sha256=" + hmac.new(SECRET, signed, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, signature)


def send_sms(to: str, text: str, request_id: str) -> None:
    """Your SMS backend goes here. This example prints one JSON line per message."""
    print(json.dumps({"to": to, "text": text, "requestId": request_id}), flush=True)


class Receiver(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY_BYTES:
            self._answer(413)
            return
        body = self.rfile.read(length)  # the raw bytes: the signature covers exactly these
        timestamp = self.headers.get("X-Pin-Timestamp", "")
        signature = self.headers.get("X-Pin-Signature", "")
        if not signature_is_valid(timestamp, signature, body, time.time()):
            self._answer(401)
            return
        message = json.loads(body)
        try:
            send_sms(message["to"], message["text"], message["requestId"])
        except Exception:
            self._answer(502)  # PIN Sessions retries once, then tells the user to try again
            return
        self._answer(204)

    def _answer(self, status: int) -> None:
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: the default line would log the client's address for every message."""


if __name__ == "__main__":
    ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Receiver).serve_forever()

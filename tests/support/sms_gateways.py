"""SMS providers as real HTTP servers on a loopback port, each speaking its documented API.

A :class:`GatewayServer` answers as its provider documents (see the module docstrings of
``pin_sessions.identity.sms.twilio`` and ``.smsru`` for what the service relies on): it checks
the credentials and the request's shape, refuses what the provider would refuse, and keeps
every request it received. A test queues faults for the next requests with ``fail_next``:
an error status, garbage, a redirect, a 10 MB body, a slow trickle, a hang.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import re
import threading
import uuid
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from types import TracebackType
from urllib.parse import parse_qsl

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from tests.support.http import LiveServer

TWILIO_ACCOUNT_SID = "AC" + "0123456789abcdef" * 2
TWILIO_AUTH_TOKEN = "twilio-auth-token-for-tests"
TWILIO_FROM = "+15005550006"
SMSRU_API_ID = "6A2F8C1E-3B5D-4E7F-9A1B-2C3D4E5F6A7B"
WEBHOOK_SECRET = "webhook-secret-for-tests"
WEBHOOK_PATH = "/hooks/sms"
TEN_MEGABYTES = 10 * 1024 * 1024
# A gateway a production configuration can name (PIN_ENV=prod refuses the log provider).
CONFIGURED_GATEWAY = {
    "PIN_SMS__PROVIDER": "webhook",
    "PIN_SMS__WEBHOOK_URL": "https://sms-gateway.internal/pin",
    "PIN_SMS__WEBHOOK_SECRET": WEBHOOK_SECRET,
}

Fault = Callable[[Request], Awaitable[Response]]


@dataclass(frozen=True)
class Received:
    """One request as the gateway got it."""

    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def form(self) -> dict[str, str]:
        return dict(parse_qsl(self.body.decode()))


class GatewayServer:
    """``with GatewayServer("twilio") as gateway:`` serves the provider for the block."""

    def __init__(self, provider: str) -> None:
        self.provider = provider
        self.received: list[Received] = []
        # Every request that reached the gateway, faulty answers included: retries show here.
        self.attempts = 0
        self.verified_signatures: list[bool] = []
        self.refused_numbers: set[str] = set()
        self._faults: deque[Fault] = deque()
        self._lock = threading.Lock()
        handlers = {"twilio": self._twilio, "smsru": self._smsru, "webhook": self._webhook}
        self._answer = handlers[provider]
        self._server = LiveServer(self._app())
        self.url = ""

    def __enter__(self) -> GatewayServer:
        self.url = self._server.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._server.stop()

    def fail_next(self, *faults: Fault) -> None:
        """Answer the next ``len(faults)`` requests with these, in order."""
        with self._lock:
            self._faults.extend(faults)

    @property
    def texts(self) -> list[str]:
        """The text of every message the gateway took, oldest first."""
        return [self._text(received) for received in self.received]

    def last_code(self) -> str:
        """The six-digit code of the newest message."""
        match = re.search(r"\b\d{6}\b", self.texts[-1])
        assert match is not None, self.texts[-1]
        return match.group(0)

    def settings(self) -> dict[str, str]:
        """The ``PIN_SMS__*`` variables that point the service at this gateway."""
        if self.provider == "twilio":
            return {
                "PIN_SMS__PROVIDER": "twilio",
                "PIN_SMS__TWILIO_ACCOUNT_SID": TWILIO_ACCOUNT_SID,
                "PIN_SMS__TWILIO_AUTH_TOKEN": TWILIO_AUTH_TOKEN,
                "PIN_SMS__TWILIO_FROM": TWILIO_FROM,
                "PIN_SMS__TWILIO_BASE_URL": self.url,
            }
        if self.provider == "smsru":
            return {
                "PIN_SMS__PROVIDER": "smsru",
                "PIN_SMS__SMSRU_API_ID": SMSRU_API_ID,
                "PIN_SMS__SMSRU_BASE_URL": self.url,
            }
        return {
            "PIN_SMS__PROVIDER": "webhook",
            "PIN_SMS__WEBHOOK_URL": self.url + WEBHOOK_PATH,
            "PIN_SMS__WEBHOOK_SECRET": WEBHOOK_SECRET,
        }

    def _text(self, received: Received) -> str:
        if self.provider == "twilio":
            return received.form["Body"]
        if self.provider == "smsru":
            return received.form["msg"]
        text: str = json.loads(received.body)["text"]
        return text

    def _app(self) -> FastAPI:
        app = FastAPI()

        @app.api_route("/{path:path}", methods=["GET", "POST"])
        async def gateway(request: Request) -> Response:
            body = await request.body()
            headers = {name.lower(): value for name, value in request.headers.items()}
            received = Received(request.url.path, headers, body)
            with self._lock:
                self.attempts += 1
                fault = self._faults.popleft() if self._faults else None
            if fault is not None:
                # A faulty answer takes nothing: the message is not recorded as received.
                return await fault(request)
            answer = self._answer(received)
            if 200 <= answer.status_code < 300:
                self.received.append(received)
            return answer

        return app

    # What each provider answers (their documented formats).

    def _twilio(self, received: Received) -> Response:
        path = f"/2010-04-01/Accounts/{TWILIO_ACCOUNT_SID}/Messages.json"
        if received.path != path:
            return _twilio_error(404, 20404, "The requested resource was not found")
        expected = base64.b64encode(f"{TWILIO_ACCOUNT_SID}:{TWILIO_AUTH_TOKEN}".encode()).decode()
        if received.headers.get("authorization") != f"Basic {expected}":
            return _twilio_error(401, 20003, "Authenticate")
        if not received.headers.get("content-type", "").startswith(
            "application/x-www-form-urlencoded"
        ):
            return _twilio_error(400, 20001, "Unsupported content type")
        form = received.form
        for field, code in (("To", 21604), ("From", 21603), ("Body", 21602)):
            if not form.get(field):
                return _twilio_error(400, code, f"A '{field}' is required")
        if form["To"] in self.refused_numbers:
            return _twilio_error(400, 21211, f"The 'To' number {form['To']} is not valid")
        sid = "SM" + uuid.uuid4().hex
        return JSONResponse(
            {
                "account_sid": TWILIO_ACCOUNT_SID,
                "api_version": "2010-04-01",
                "body": form["Body"],
                "direction": "outbound-api",
                "error_code": None,
                "error_message": None,
                "from": form["From"],
                "num_segments": "1",
                "sid": sid,
                "status": "queued",
                "to": form["To"],
                "uri": f"/2010-04-01/Accounts/{TWILIO_ACCOUNT_SID}/Messages/{sid}.json",
            },
            status_code=201,
        )

    def _smsru(self, received: Received) -> Response:
        if received.path != "/sms/send":
            return Response("Not found", status_code=404)
        form = received.form
        if form.get("api_id") != SMSRU_API_ID:
            return _smsru_reply({"status": "ERROR", "status_code": 200, "status_text": "api_id"})
        to, text = form.get("to", ""), form.get("msg", "")
        if not text:
            return _smsru_reply({"status": "ERROR", "status_code": 202, "status_text": "msg"})
        if form.get("json") != "1":
            return Response("100\n000000-10000000\nbalance=4122.56", media_type="text/plain")
        if not to.isdigit() or to in self.refused_numbers:
            entry = {"status": "ERROR", "status_code": 207, "status_text": "cannot send"}
        else:
            entry = {"status": "OK", "status_code": 100, "sms_id": "000000-10000000"}
        reply = {"status": "OK", "status_code": 100, "sms": {to: entry}, "balance": 4122.56}
        return _smsru_reply(reply)

    def _webhook(self, received: Received) -> Response:
        if received.path != WEBHOOK_PATH:
            return Response(status_code=404)
        timestamp = received.headers.get("x-pin-timestamp", "")
        signed = timestamp.encode() + b"." + received.body
        expected = hmac.new(WEBHOOK_SECRET.encode(), signed, hashlib.sha256).hexdigest()
        verified = hmac.compare_digest(
            received.headers.get("x-pin-signature", ""), f"sha256={expected}"
        )
        self.verified_signatures.append(verified)
        if not verified:
            return Response(status_code=401)
        return Response(status_code=204)


def _twilio_error(status: int, code: int, message: str) -> JSONResponse:
    return JSONResponse(
        {
            "code": code,
            "message": message,
            "more_info": f"https://www.twilio.com/docs/errors/{code}",
            "status": status,
        },
        status_code=status,
    )


def _smsru_reply(body: dict[str, object]) -> JSONResponse:
    # SMS.ru answers 200 whatever happened; the JSON says what.
    return JSONResponse(body, status_code=200)


# Faults, for ``fail_next``.


def status(code: int, body: bytes = b"", headers: dict[str, str] | None = None) -> Fault:
    async def fault(request: Request) -> Response:
        return Response(body, status_code=code, headers=headers)

    return fault


def garbage() -> Fault:
    """A 200 whose body is no answer of the provider's."""
    return status(200, b"<html><body>Service temporarily moved</body></html>")


def nested_json(code: int = 200) -> Fault:
    """JSON nested deeper than any parser recurses, well within the size an answer may have."""
    return status(code, b"[" * 30_000 + b"]" * 30_000, {"Content-Type": "application/json"})


def redirect() -> Fault:
    """A redirect to the same endpoint: following it would deliver (and double the request)."""

    async def fault(request: Request) -> Response:
        return Response(status_code=307, headers={"Location": str(request.url)})

    return fault


def huge(*, declared: bool) -> Fault:
    """A 200 with 10 MB of body, with or without a Content-Length announcing it."""

    async def fault(request: Request) -> Response:
        if declared:
            return Response(b"x" * TEN_MEGABYTES, status_code=200)
        return StreamingResponse(_chunks(request, TEN_MEGABYTES, 64 * 1024, 0), status_code=200)

    return fault


def trickle(seconds_per_byte: float = 0.1) -> Fault:
    """A 200 whose body comes a byte at a time (5 minutes of it), each read within any
    per-read timeout."""

    async def fault(request: Request) -> Response:
        return StreamingResponse(_chunks(request, 3000, 1, seconds_per_byte), status_code=200)

    return fault


def hang() -> Fault:
    """No answer at all (for 5 minutes), until the client gives up and hangs up."""

    async def fault(request: Request) -> Response:
        for _ in range(6000):
            if await request.is_disconnected():
                break
            await asyncio.sleep(0.05)
        return Response(status_code=504)

    return fault


async def _chunks(request: Request, total: int, size: int, pause: float) -> AsyncIterator[bytes]:
    sent = 0
    while sent < total and not await request.is_disconnected():
        yield b"x" * size
        sent += size
        await asyncio.sleep(pause)

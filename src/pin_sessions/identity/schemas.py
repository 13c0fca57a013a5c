"""Request and response bodies of identity's API, camelCase on the wire.

Request bodies forbid unknown fields.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from pin_sessions.identity.operations import TokenPair
from pin_sessions.platform.http.openapi import example
from pin_sessions.platform.http.validation import documented_pattern, pattern_check
from pin_sessions.platform.phone_numbers import E164_IN_WORDS, E164_PATTERN

# What an export of the caller's account looks like (exportMyAccount).
EXPORT_EXAMPLE = {
    "userId": "3f0b1e52-7c1d-4a8e-9b6f-2d5c8e1a4b70",
    "phoneNumber": "+15550100200",
    "exportedAt": "2026-12-07T12:00:00Z",
    "signIns": [
        {"sessionId": "01a252d8-d4cc-7d8a-a9c5-adbfee5252f0", "signedInAt": "2026-12-01T09:30:00Z"}
    ],
}

# One signed-in device, as the device list shows it.
SESSION_EXAMPLE = {
    "sessionId": "01a252d8-d4cc-7d8a-a9c5-adbfee5252f0",
    "status": "Active",
    "createdAt": "2026-12-01T09:30:00Z",
    "lastUsedAt": "2026-12-07T11:58:00Z",
    "expiresAt": "2027-01-06T11:58:00Z",
    "device": {"type": "Mobile", "os": "iOS 18", "browser": "Mobile Safari 18"},
    "current": True,
}

MAX_REFRESH_TOKEN_LENGTH = 256
# A code of any other shape is simply a wrong code (400, one attempt used), not a 422 that
# would spare the guesser an attempt; the bound only keeps the input small.
MAX_CODE_LENGTH = 64


class _Body(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, extra="forbid", frozen=True)


class _Out(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)


class NoFieldsBody(_Body):
    """No fields: send no body, or `{}`; any field is refused."""

    model_config = example({})


class SignInRequestBody(_Body):
    """The phone to text a sign-in code to."""

    model_config = example({"phoneNumber": "+15550100200"})
    phone_number: Annotated[
        str,
        pattern_check(E164_PATTERN, E164_IN_WORDS),
        documented_pattern(E164_PATTERN),
        Field(description="The phone to text the code to, in E.164 form"),
    ]


class SignInRequestOut(_Out):
    """The sign-in request to confirm, and until when its code is valid."""

    model_config = example(
        {"requestId": "01a252d8-46b9-7c2e-8f1a-3b5d7e9f1a2c", "expiresAt": "2026-12-07T12:05:00Z"}
    )
    request_id: uuid.UUID
    expires_at: datetime


class ConfirmBody(_Body):
    """The sign-in request and the code its SMS carried."""

    model_config = example({"requestId": "01a252d8-46b9-7c2e-8f1a-3b5d7e9f1a2c", "code": "482913"})
    request_id: uuid.UUID
    code: Annotated[str, Field(max_length=MAX_CODE_LENGTH)]


class RefreshBody(_Body):
    """The refresh token of the last pair received."""

    model_config = example({"refreshToken": "q3Vt9mK2xR7pL0sW4yB8nE1cF6hJ5aD2gT9uI3oP7kM"})
    refresh_token: Annotated[str, Field(min_length=1, max_length=MAX_REFRESH_TOKEN_LENGTH)]


class TokenPairOut(_Out):
    """A signed-in user's tokens: send the access token as `Authorization: Bearer …`; keep
    the refresh token to get the next pair."""

    model_config = example(
        {
            "userId": "3f0b1e52-7c1d-4a8e-9b6f-2d5c8e1a4b70",
            "sessionId": "01a252d8-d4cc-7d8a-a9c5-adbfee5252f0",
            "accessToken": "eyJhbGciOiJFUzI1NiIsImtpZCI6Ii4uLiIsInR5cCI6ImF0K2p3dCJ9...",
            "accessTokenExpiresAt": "2026-12-07T12:15:00Z",
            "refreshToken": "q3Vt9mK2xR7pL0sW4yB8nE1cF6hJ5aD2gT9uI3oP7kM",
            "refreshTokenExpiresAt": "2027-01-06T12:00:00Z",
        }
    )
    user_id: uuid.UUID
    session_id: uuid.UUID
    access_token: str
    access_token_expires_at: datetime
    refresh_token: str
    refresh_token_expires_at: datetime

    @classmethod
    def of(cls, pair: TokenPair) -> TokenPairOut:
        return cls(
            user_id=pair.user_id,
            session_id=pair.session_id,
            access_token=pair.access_token,
            access_token_expires_at=pair.access_token_expires_at,
            refresh_token=pair.refresh_token,
            refresh_token_expires_at=pair.refresh_token_expires_at,
        )


class DeviceOut(_Out):
    """The device a session signed in from, as its user agent says."""

    model_config = example({"type": "Mobile", "os": "iOS 18", "browser": "Mobile Safari 18"})
    type: str
    os: str | None
    browser: str | None


class SessionOut(_Out):
    """One signed-in device of the caller; `current` marks the one calling."""

    model_config = example(SESSION_EXAMPLE)

    session_id: uuid.UUID
    status: str
    created_at: datetime
    last_used_at: datetime
    expires_at: datetime
    device: DeviceOut
    current: bool


class SessionsOut(_Out):
    """The caller's live sessions."""

    model_config = example({"items": [SESSION_EXAMPLE]})

    items: list[SessionOut]


class DevCodeOut(_Out):
    """The code a development SMS carried."""

    model_config = example({"code": "482913"})
    code: str

"""Request and response bodies of identity's API (SPEC §4), camelCase on the wire.

Request bodies forbid unknown fields.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from pin_sessions.identity.operations import TokenPair
from pin_sessions.platform.http.validation import documented_pattern, pattern_check
from pin_sessions.platform.phone_numbers import E164_IN_WORDS, E164_PATTERN

MAX_REFRESH_TOKEN_LENGTH = 256
# A code of any other shape is simply a wrong code (400, one attempt used), not a 422 that
# would spare the guesser an attempt; the bound only keeps the input small.
MAX_CODE_LENGTH = 64


class _Body(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, extra="forbid", frozen=True)


class _Out(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)


class NoFieldsBody(_Body):
    """Logout's and the revoke routes' body: absent or ``{}``; any field is refused (SPEC §4)."""


class SignInRequestBody(_Body):
    phone_number: Annotated[
        str,
        pattern_check(E164_PATTERN, E164_IN_WORDS),
        documented_pattern(E164_PATTERN),
        Field(description="The phone to text the code to, in E.164 form"),
    ]


class SignInRequestOut(_Out):
    request_id: uuid.UUID
    expires_at: datetime


class ConfirmBody(_Body):
    request_id: uuid.UUID
    code: Annotated[str, Field(max_length=MAX_CODE_LENGTH)]


class RefreshBody(_Body):
    refresh_token: Annotated[str, Field(min_length=1, max_length=MAX_REFRESH_TOKEN_LENGTH)]


class TokenPairOut(_Out):
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
    type: str
    os: str | None
    browser: str | None


class SessionOut(_Out):
    session_id: uuid.UUID
    status: str
    created_at: datetime
    last_used_at: datetime
    expires_at: datetime
    device: DeviceOut
    current: bool


class SessionsOut(_Out):
    items: list[SessionOut]


class DevCodeOut(_Out):
    code: str

"""Fixtures of the user-activity tests: signed-in users, m2m tokens, table readers."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Awaitable, Callable, Iterable
from datetime import datetime
from typing import Any

import pytest

from pin_sessions.identity.events import user_signed_in
from pin_sessions.platform.clock import FixedClock
from pin_sessions.platform.ids import new_id
from pin_sessions.platform.outbox import IntegrationEvent
from pin_sessions.platform.runtime import Runtime
from tests.support.tokens import Tokens
from tests.support.users import SignedInUser, signed_in_user

UserFactory = Callable[..., Awaitable[SignedInUser]]

IPHONE = (
    "Mozilla/5.0 (iPhone; CPU iPhone OS 18_0 like Mac OS X) AppleWebKit/605.1.15 "
    "(KHTML, like Gecko) Version/18.0 Mobile/15E148 Safari/604.1"
)


@pytest.fixture
def tokens(runtime: Runtime) -> Tokens:
    return Tokens.of(runtime)


@pytest.fixture
def new_user(runtime: Runtime, tokens: Tokens, clock: FixedClock) -> UserFactory:
    async def create(permissions: Iterable[str] = ()) -> SignedInUser:
        async with runtime.database.transaction() as conn:
            return await signed_in_user(
                conn, tokens.signer, now=clock.now(), permissions=permissions
            )

    return create


def device(anonymous_id: uuid.UUID, user: SignedInUser | None = None) -> dict[str, str]:
    headers = {"X-Anonymous-Id": str(anonymous_id), "User-Agent": IPHONE}
    if user is not None:
        headers.update(user.headers)
    return headers


async def sessions_of(runtime: Runtime, anonymous_id: uuid.UUID) -> list[dict[str, Any]]:
    async with runtime.database.connection() as conn:
        rows = await conn.fetch(
            "select * from user_activity.sessions where anonymous_id = $1 order by created_at, id",
            anonymous_id,
        )
    return [dict(row) for row in rows]


async def outbox(runtime: Runtime, event_type: str | None = None) -> list[dict[str, Any]]:
    async with runtime.database.connection() as conn:
        rows = await conn.fetch(
            "select * from messaging.outbox where $1::text is null or event_type = $1 "
            "order by position",
            event_type,
        )
    return [dict(row) for row in rows]


def sign_in_event(
    user_id: uuid.UUID,
    anonymous_id: uuid.UUID,
    signed_in_at: datetime,
    *,
    topic: str = "pin.identity.sign-ins.v1",
) -> IntegrationEvent:
    """Identity's sign-in event, as it writes it, on ``topic`` (a per-test one on Kafka)."""
    event = user_signed_in(user_id, new_id(), anonymous_id, signed_in_at)
    return dataclasses.replace(event, topic=topic)

"""SPEC §10 over both buses: identity's user-erased reaches user-activity and dev-stats.

The event is written by identity's erasure itself; each context's consumer runs on the
bus under test and applies it: the user's activity deleted, the user's id gone from the
dev-stats facts, counts kept.
"""

from __future__ import annotations

import uuid

from pin_sessions.dev_stats.consumers import UserErasedConsumer as DevStatsUserErased
from pin_sessions.dev_stats.domain import SessionFact
from pin_sessions.dev_stats.recording import record_session_ended
from pin_sessions.identity.user_data import RequestedBy, UserData
from pin_sessions.platform.ids import new_id
from pin_sessions.user_activity import recording, sessions
from pin_sessions.user_activity.consumers import UserErasedConsumer as ActivityUserErased
from pin_sessions.user_activity.domain import SignedInCaller, device_info
from tests.conftest import T0
from tests.platform.messaging.pipeline import Pipeline, RenamedPreparing, eventually
from tests.support.erasure import ERASURE_BATCH
from tests.support.tokens import Tokens
from tests.support.users import signed_in_user
from tests.user_activity.conftest import IPHONE

COUNT_ACTIVITY = """
select (select count(*) from user_activity.sessions where user_id = $1)
     + (select count(*) from user_activity.action_events where user_id = $1)
"""
COUNT_FACTS = """
select count(*) filter (where user_id = $1) as theirs, count(*) as facts
from dev_stats.session_facts
"""


async def test_an_erasure_is_applied_by_both_contexts(pipeline: Pipeline) -> None:
    runtime = pipeline.runtime
    now = runtime.clock.now()
    async with runtime.database.transaction() as conn:
        user = await signed_in_user(conn, Tokens.of(runtime).signer, now=now)
    anonymous_id = new_id()
    device = device_info(IPHONE, None)
    caller = SignedInCaller(user.user_id, now)
    await sessions.start_session(runtime.database, anonymous_id, caller, device, now)
    await recording.record_action(
        runtime.database,
        anonymous_id,
        caller,
        device,
        now,
        action_type="favorites.add",
        property_object_id=None,
        data=None,
    )
    async with runtime.database.transaction() as conn:
        for owner in (user.user_id, None):
            fact = SessionFact(
                session_id=uuid.uuid4(),
                message_id=uuid.uuid4(),
                anonymous_id=uuid.uuid4(),
                user_id=owner,
                created_at=T0,
                last_activity_at=T0,
                duration_seconds=60,
            )
            await record_session_ended(conn, fact, now=now)

    # Identity's own erasure writes the event; on Kafka it goes to this test's topic.
    erasure = await UserData(runtime.database).erase(user.user_id, RequestedBy.OPERATOR, now)
    topic = pipeline.topic("pin.identity.user-erased.v1")
    if topic != "pin.identity.user-erased.v1":
        async with runtime.database.transaction() as conn:
            await conn.execute(
                "update messaging.outbox set topic = $1 where message_id = $2",
                topic,
                erasure.message_id,
            )
    pipeline.start_consumers(
        RenamedPreparing(
            ActivityUserErased(ERASURE_BATCH),
            pipeline.consumer_name("user-activity-user-erased"),
            topic,
        ),
        RenamedPreparing(
            DevStatsUserErased(ERASURE_BATCH),
            pipeline.consumer_name("dev-stats-user-erased"),
            topic,
        ),
    )

    async def applied() -> bool:
        async with runtime.database.connection() as conn:
            activity = await conn.fetchval(COUNT_ACTIVITY, user.user_id)
            facts = await conn.fetchrow(COUNT_FACTS, user.user_id)
        assert facts is not None
        return bool(activity == 0 and facts["theirs"] == 0 and facts["facts"] == 2)

    await eventually(applied, tasks=pipeline.tasks)

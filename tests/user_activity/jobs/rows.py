"""Seeding user-activity rows for the job tests: one set-based INSERT per call, so
thousands of sessions take a fraction of a second, and readers of what the jobs wrote."""

from __future__ import annotations

import uuid
from collections import Counter
from datetime import datetime

from pin_sessions.platform.database import Connection

INSERT_SESSIONS = """
insert into user_activity.sessions
    (id, anonymous_id, user_id, linked_at, signed_in_at, status, created_at, last_activity_at,
     ended_at, duration, device_user_agent, device_type)
select gen_random_uuid(), gen_random_uuid(), $1,
       case when $1::uuid is null then null else $2::timestamptz end,
       case when $1::uuid is null then null else $2::timestamptz end,
       $4::varchar, $2, $3,
       case when $4::varchar = 'Inactive' then $3::timestamptz end,
       case when $4::varchar = 'Inactive' then $3::timestamptz - $2::timestamptz end,
       'test-agent', 'Desktop'
from generate_series(1, $5)
returning id
"""

INSERT_VIEWS = """
insert into user_activity.property_object_views
    (id, session_id, property_object_id, user_id, started_at, ended_at, duration)
select gen_random_uuid(), session_id, gen_random_uuid(), null, $2::timestamptz, $3::timestamptz,
       $3::timestamptz - $2::timestamptz
from unnest($1::uuid[]) as ids(session_id)
returning id
"""

INSERT_ACTIONS = """
insert into user_activity.action_events (id, session_id, user_id, type, created_at)
select gen_random_uuid(), session_id, null, 'test', $2::timestamptz
from unnest($1::uuid[]) as ids(session_id)
"""

SELECT_ENDED_EVENTS = """
select aggregate_id from messaging.outbox where event_type = 'pin.user-activity.session-ended'
"""


async def insert_sessions(
    conn: Connection,
    *,
    count: int,
    created_at: datetime,
    last_activity_at: datetime,
    status: str = "Active",
    user_id: uuid.UUID | None = None,
) -> list[uuid.UUID]:
    """``count`` sessions, each on its own device; Inactive ones ended at their last activity."""
    rows = await conn.fetch(INSERT_SESSIONS, user_id, created_at, last_activity_at, status, count)
    return [row["id"] for row in rows]


async def insert_views(
    conn: Connection,
    session_ids: list[uuid.UUID],
    *,
    started_at: datetime,
    ended_at: datetime | None = None,
) -> list[uuid.UUID]:
    """One view per session: open unless ``ended_at`` is given."""
    rows = await conn.fetch(INSERT_VIEWS, session_ids, started_at, ended_at)
    return [row["id"] for row in rows]


async def insert_actions(
    conn: Connection, session_ids: list[uuid.UUID], *, created_at: datetime
) -> None:
    await conn.execute(INSERT_ACTIONS, session_ids, created_at)


async def session_ended_counts(conn: Connection) -> Counter[str]:
    """How many session-ended events each session has in the outbox."""
    return Counter(row["aggregate_id"] for row in await conn.fetch(SELECT_ENDED_EVENTS))

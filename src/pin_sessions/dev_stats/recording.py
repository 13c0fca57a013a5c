"""Recording an ended session (consumer ``dev-stats-session-ended``): its fact and its day's
rollup, in the consumer's transaction."""

from __future__ import annotations

from datetime import datetime

from pin_sessions.dev_stats import durations, repository
from pin_sessions.dev_stats.domain import SessionFact
from pin_sessions.dev_stats.user_data import is_erased
from pin_sessions.platform.database import Connection


async def record_session_ended(conn: Connection, fact: SessionFact, *, now: datetime) -> bool:
    """Keep the fact and count it in its day's rollup, in the caller's transaction.

    False when the session was already counted; then nothing changes. The session of a
    user erased meanwhile is counted as a user's, and its fact keeps no user id (SPEC §10).
    """
    erased = fact.user_id is not None and await is_erased(conn, fact.user_id)
    recorded = await repository.record_fact(
        conn, fact, duration_bucket=durations.bucket_of(fact.duration_seconds), now=now
    )
    if erased:
        await repository.clear_fact_user(conn, fact.session_id)
    return recorded

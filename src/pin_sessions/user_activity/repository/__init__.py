"""user-activity's one door to the database: every statement of ``user_activity/queries.sql``
runs through a function of this package, on the caller's connection; none commits.

One module per group of use cases, all re-exported here: ``sessions`` (start, heartbeat,
link, close), ``recording`` (actions, views, ``Idempotency-Key``), ``history`` (the read
side), ``jobs`` (ActivityCloserJob, ActivityRetentionJob), ``user_data`` (tombstones,
erasure, export).
"""

from __future__ import annotations

from pin_sessions.user_activity.repository.history import (
    After,
    count_open_sessions,
    device_history,
    device_link,
    history_actions,
    history_views,
    user_history,
)
from pin_sessions.user_activity.repository.jobs import (
    RETIRED_ROWS,
    claim_idle_sessions,
    claim_retired_sessions,
    count_idle_sessions,
    delete_expired_idempotency_keys,
    delete_retired,
)
from pin_sessions.user_activity.repository.recording import (
    end_view,
    idempotency_key,
    insert_action,
    insert_view,
    remember_idempotent_response,
    reserve_idempotency_key,
    view_on_device,
)
from pin_sessions.user_activity.repository.sessions import (
    close_open_views,
    close_sessions,
    continue_or_start,
    extend_session,
    extend_sessions,
    insert_session,
    insert_switched_session,
    issue_anonymous_id,
    latest_link_since,
    link_session,
    lock_active_session,
    snapshot,
)
from pin_sessions.user_activity.repository.user_data import (
    ERASURE_DELETES,
    TOMBSTONES,
    USER_LOCK_CLASS,
    actions_of,
    delete_erased_user_active_sessions,
    delete_erased_user_rows,
    sessions_of,
    views_of,
)

__all__ = [
    "ERASURE_DELETES",
    "RETIRED_ROWS",
    "TOMBSTONES",
    "USER_LOCK_CLASS",
    "After",
    "actions_of",
    "claim_idle_sessions",
    "claim_retired_sessions",
    "close_open_views",
    "close_sessions",
    "continue_or_start",
    "count_idle_sessions",
    "count_open_sessions",
    "delete_erased_user_active_sessions",
    "delete_erased_user_rows",
    "delete_expired_idempotency_keys",
    "delete_retired",
    "device_history",
    "device_link",
    "end_view",
    "extend_session",
    "extend_sessions",
    "history_actions",
    "history_views",
    "idempotency_key",
    "insert_action",
    "insert_session",
    "insert_switched_session",
    "insert_view",
    "issue_anonymous_id",
    "latest_link_since",
    "link_session",
    "lock_active_session",
    "remember_idempotent_response",
    "reserve_idempotency_key",
    "sessions_of",
    "snapshot",
    "user_history",
    "view_on_device",
    "views_of",
]

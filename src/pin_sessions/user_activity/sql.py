"""Every statement of the user-activity context, named: the Session API's, then its jobs'.

State transitions are single conditional statements (``… WHERE status = 'Active'``),
so a race has one winner by construction. Nothing else in the context holds SQL besides
``queries.sql`` (a user's erasure, in named blocks).
"""

from __future__ import annotations

# INV-SES-003/006, for every device of a group commit (``heartbeats``): one conditional
# UPDATE, without loading the aggregate; an Inactive session never matches. One row per
# device in $1 (the caller merged duplicates); ``greatest`` keeps the activity time
# monotonic across instances. It never waits on a row lock (SPEC §11): ``claimed`` takes
# the Active rows no other transaction holds, and the statement also returns, with a null
# id, each device whose Active row (as the statement's snapshot sees it) was not claimed —
# locked by another transaction, or closed since — for the caller to extend on its own.
# That second read runs only when something was left unclaimed.
HEARTBEAT_BATCH = """
with claimed as (
    select s.id, batch.at
    from unnest($1::uuid[], $2::timestamptz[]) as batch(anonymous_id, at)
    join user_activity.sessions as s
        on s.anonymous_id = batch.anonymous_id and s.status = 'Active'
    for no key update of s skip locked
), extended as (
    update user_activity.sessions as s
    set last_activity_at = greatest(s.last_activity_at, claimed.at)
    from claimed
    where s.id = claimed.id and s.status = 'Active'
    returning s.anonymous_id, s.id, s.last_activity_at
)
select anonymous_id, id, last_activity_at from extended
union all
select s.anonymous_id, null, null
from user_activity.sessions as s
where (select count(*) from claimed) < cardinality($1::uuid[])
    and s.anonymous_id = any($1::uuid[]) and s.status = 'Active'
    and not exists (select from claimed where claimed.id = s.id)
"""

# One device that the batch left out because another transaction held its row: the same
# conditional UPDATE, waiting for that lock (bounded by the statement timeout). A row
# closed meanwhile no longer matches, and the device has no Active session.
HEARTBEAT_ONE = """
update user_activity.sessions
set last_activity_at = greatest(last_activity_at, $2)
where anonymous_id = $1 and status = 'Active'
returning id, last_activity_at
"""

# INV-SES-001/003 in one statement: continue the device's Active session or start one. The
# partial unique index decides between racing starts: the losers extend the winner's session
# instead (the caller learns which happened by comparing the returned id with the one it
# proposed). An Active session is only extended, whoever calls: only linking changes who is
# on a device (SPEC §11). A new session is the signed-in caller's ($3, signed in at $10)
# unless the device's latest link since that sign-in is another user's: then it is a
# guest's. Linked, it takes the instant of its user's latest sign-in known on the device,
# the key later links are ordered by (SELECT_LATEST_LINK_SINCE). A link that commits while
# this runs either made the device's Active session, which this then extends, or waits for
# this session and judges it.
CONTINUE_OR_START_SESSION = """
with latest_link as (
    select user_id, linked_at
    from user_activity.sessions
    where $3::uuid is not null and anonymous_id = $2 and linked_at > $10::timestamptz
    order by linked_at desc, id desc
    limit 1
),
owner as (
    select $3::uuid as user_id,
           coalesce((select linked_at from latest_link), $10::timestamptz) as linked_at
    where $3::uuid is not null
      and coalesce((select user_id from latest_link) = $3::uuid, true)
)
insert into user_activity.sessions
    (id, anonymous_id, user_id, linked_at, status, created_at, last_activity_at,
     device_user_agent, device_type, device_os, device_browser, device_ip)
values ($1, $2, (select user_id from owner), (select linked_at from owner),
        'Active', $4, $4, $5, $6, $7, $8, $9)
on conflict (anonymous_id) where status = 'Active'
do update set last_activity_at = greatest(sessions.last_activity_at, excluded.last_activity_at)
returning id, anonymous_id, user_id, linked_at, status, created_at, last_activity_at
"""

# A linker's new session, of user $3 linked at $10 (both null for a guest's): when the
# device already has an Active one, nothing is inserted and the linker re-reads it
# (INV-SES-001).
INSERT_SESSION = """
insert into user_activity.sessions
    (id, anonymous_id, user_id, linked_at, status, created_at, last_activity_at,
     device_user_agent, device_type, device_os, device_browser, device_ip)
values ($1, $2, $3, $10, 'Active', $4, $4, $5, $6, $7, $8, $9)
on conflict (anonymous_id) where status = 'Active' do nothing
returning id, anonymous_id, user_id, linked_at, status, created_at, last_activity_at
"""

# SPEC §11: the device's latest link standing for a sign-in later than $2, and whose. Every
# linked_at is the instant of the sign-in its link stands for (a token's auth_time, a
# sign-in event's SignedInAt), so this orders sign-ins whatever order their links arrived
# in. Through ix_sessions_anonymous_id: one device's sessions, bounded by retention.
SELECT_LATEST_LINK_SINCE = """
select user_id, linked_at
from user_activity.sessions
where anonymous_id = $1 and linked_at > $2
order by linked_at desc, id desc
limit 1
"""

# Link holds the device's Active session until it commits, so two users linking one
# device at once are serialised and the second sees the first one's outcome: its next
# statement (SELECT_LATEST_LINK_SINCE) reads the device's history with the first committed.
LOCK_ACTIVE_SESSION = """
select id, anonymous_id, user_id, linked_at, status, created_at, last_activity_at
from user_activity.sessions
where anonymous_id = $1 and status = 'Active'
for update
"""

# INV-SES-002: user_id is set once, null → value.
LINK_SESSION = """
update user_activity.sessions
set user_id = $2, linked_at = $3
where id = $1 and status = 'Active' and user_id is null
returning id, anonymous_id, user_id, linked_at, status, created_at, last_activity_at
"""

# The session that replaces a force-closed one: same device, parsed once, new user;
# linked at $4 (the instant of the sign-in the link stands for), started at $5 (now).
INSERT_SWITCHED_SESSION = """
insert into user_activity.sessions
    (id, anonymous_id, user_id, linked_at, status, created_at, last_activity_at,
     device_user_agent, device_type, device_os, device_browser, device_ip)
select $1, anonymous_id, $3, $4, 'Active', $5, $5,
       device_user_agent, device_type, device_os, device_browser, device_ip
from user_activity.sessions
where id = $2
returning id, anonymous_id, user_id, linked_at, status, created_at, last_activity_at
"""

# INV-SES-005: Active → Inactive with the duration computed in the same statement.
# ``$3`` lets the closer re-check idleness, so a heartbeat that committed first wins.
CLOSE_SESSIONS = """
update user_activity.sessions
set status = 'Inactive', ended_at = $2, duration = last_activity_at - created_at
where id = any($1::uuid[])
  and status = 'Active'
  and ($3::timestamptz is null or last_activity_at < $3)
returning id, anonymous_id, user_id, created_at, last_activity_at, duration, device_type
"""

# INV-LV-007: open views of closed sessions end at the session's last activity, never
# before they started.
CLOSE_OPEN_VIEWS = """
update user_activity.property_object_views as v
set ended_at = greatest(s.last_activity_at, v.started_at),
    duration = greatest(s.last_activity_at, v.started_at) - v.started_at
from user_activity.sessions as s
where s.id = any($1::uuid[]) and v.session_id = s.id and v.ended_at is null
returning v.id, v.session_id, v.property_object_id, s.user_id, v.started_at, v.ended_at,
          v.duration
"""

INSERT_ACTION = """
insert into user_activity.action_events
    (id, session_id, user_id, type, property_object_id, data, created_at)
values ($1, $2, $3, $4, $5, $6, $7)
"""

INSERT_VIEW = """
insert into user_activity.property_object_views
    (id, session_id, property_object_id, user_id, started_at)
values ($1, $2, $3, $4, $5)
"""

# Ending is conditional on the view still being open and belonging to the caller's device.
END_VIEW = """
update user_activity.property_object_views as v
set ended_at = greatest($3, v.started_at), duration = greatest($3, v.started_at) - v.started_at
from user_activity.sessions as s
where v.id = $1 and v.ended_at is null and s.id = v.session_id and s.anonymous_id = $2
returning v.id, v.session_id, v.property_object_id, s.user_id, v.started_at, v.ended_at,
          v.duration
"""

SELECT_VIEW_ON_DEVICE = """
select v.id, v.duration
from user_activity.property_object_views as v
join user_activity.sessions as s on s.id = v.session_id
where v.id = $1 and s.anonymous_id = $2
"""

# Idempotency-Key (SPEC §8): reserve the device's key, or take over one older than $5 (its
# 24 hours are over). A key another transaction holds makes this wait for that one to end:
# committed, this returns no row and the caller reads the first answer; rolled back, this
# reserves it. So racing repeats record once.
RESERVE_IDEMPOTENCY_KEY = """
insert into user_activity.idempotency_keys (anonymous_id, key, request_hash, created_at)
values ($1, $2, $3, $4)
on conflict (anonymous_id, key) do update
set request_hash = excluded.request_hash, created_at = excluded.created_at, response = null
where idempotency_keys.created_at <= $5
returning key
"""

SELECT_IDEMPOTENCY_KEY = """
select request_hash, response
from user_activity.idempotency_keys
where anonymous_id = $1 and key = $2
"""

REMEMBER_IDEMPOTENT_RESPONSE = """
update user_activity.idempotency_keys
set response = $3
where anonymous_id = $1 and key = $2
"""

# History pages: newest first; the cursor is the (created_at, id) of the last item seen.
# A guest sees only the device's unlinked sessions: a linked one belongs to its user.
SELECT_DEVICE_HISTORY = """
select id, anonymous_id, user_id, linked_at, status, created_at, last_activity_at, ended_at,
       duration, device_type, device_os, device_browser
from user_activity.sessions
where anonymous_id = $1
  and user_id is null
  and ($2::timestamptz is null or (created_at, id) < ($2, $3::uuid))
order by created_at desc, id desc
limit $4
"""

SELECT_USER_HISTORY = """
select id, anonymous_id, user_id, linked_at, status, created_at, last_activity_at, ended_at,
       duration, device_type, device_os, device_browser
from user_activity.sessions
where user_id = $1
  and ($2::timestamptz is null or (created_at, id) < ($2, $3::uuid))
order by created_at desc, id desc
limit $4
"""

# Children of a page of sessions, the latest $2 of each: "before and after sign-in" is
# assembled here, through session ownership, never by rewriting the children's user_id.
SELECT_HISTORY_ACTIONS = """
select session_id, id, user_id, type, property_object_id, data, created_at
from (
    select a.*, row_number() over (
        partition by a.session_id order by a.created_at desc, a.id desc
    ) as rank
    from user_activity.action_events as a
    where a.session_id = any($1::uuid[])
) as ranked
where rank <= $2
order by session_id, created_at, id
"""

SELECT_HISTORY_VIEWS = """
select session_id, id, user_id, property_object_id, started_at, ended_at, duration
from (
    select v.*, row_number() over (
        partition by v.session_id order by v.started_at desc, v.id desc
    ) as rank
    from user_activity.property_object_views as v
    where v.session_id = any($1::uuid[])
) as ranked
where rank <= $2
order by session_id, started_at, id
"""

# Sessions open right now, bots left out as dev-stats leaves them out (closing.py); through
# the partial index of Active sessions.
COUNT_OPEN_SESSIONS = """
select count(*) from user_activity.sessions
where status = 'Active' and device_type <> 'Bot'
"""

# The device's current link: its latest session.
SELECT_DEVICE_LINK = """
select anonymous_id, user_id, linked_at
from user_activity.sessions
where anonymous_id = $1
order by created_at desc, id desc
limit 1
"""


# --- ActivityCloserJob (seed 004) ----------------------------------------------------------

# Through ix_sessions_active_last_activity, oldest activity first; SKIP LOCKED leaves
# sessions another closer or a linker holds to them.
CLAIM_IDLE_SESSIONS = """
select id from user_activity.sessions
where status = 'Active' and last_activity_at < $1
order by last_activity_at
limit $2
for update skip locked
"""

COUNT_IDLE_SESSIONS = """
select count(*) from user_activity.sessions
where status = 'Active' and last_activity_at < $1
"""


# --- ActivityRetentionJob ------------------------------------------------------------------

CLAIM_RETIRED_SESSIONS = """
select id from user_activity.sessions
where status = 'Inactive' and created_at < $1
order by created_at
limit $2
for update skip locked
"""

DELETE_ACTION_EVENTS = """
delete from user_activity.action_events where session_id = any($1::uuid[])
"""

DELETE_PROPERTY_OBJECT_VIEWS = """
delete from user_activity.property_object_views where session_id = any($1::uuid[])
"""

DELETE_SESSIONS = """
delete from user_activity.sessions where id = any($1::uuid[]) and status = 'Inactive'
"""

# Keys past their 24 hours, a bounded batch at a time; SKIP LOCKED leaves a key a request is
# taking over.
DELETE_EXPIRED_IDEMPOTENCY_KEYS = """
delete from user_activity.idempotency_keys
where (anonymous_id, key) in (
    select anonymous_id, key from user_activity.idempotency_keys
    where created_at <= $1
    order by created_at
    limit $2
    for update skip locked
)
"""

# --- A user's data: its export (SPEC §10); its erasure is in queries.sql ------------------

# Export pages, by key after the parameters before the last, the last being the page size.
# The key's first column bounded on its own too: that is what the index can seek to.
EXPORT_SESSIONS_PAGE = """
select id, anonymous_id, user_id, linked_at, status, created_at, last_activity_at, ended_at,
       duration, device_user_agent, device_type, device_os, device_browser, device_ip
from user_activity.sessions
where user_id = $1 and created_at >= $2 and (created_at, id) > ($2, $3)
order by created_at, id
limit $4
"""

EXPORT_VIEWS_PAGE = """
select id, property_object_id, user_id, started_at, ended_at, duration
from user_activity.property_object_views
where session_id = $1 and started_at >= $2 and (started_at, id) > ($2, $3)
order by started_at, id
limit $4
"""

EXPORT_ACTIONS_PAGE = """
select id, user_id, type, property_object_id, data, created_at
from user_activity.action_events
where session_id = $1 and created_at >= $2 and (created_at, id) > ($2, $3)
order by created_at, id
limit $4
"""

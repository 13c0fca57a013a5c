-- user-activity's statements (SPEC §3 tables), run through user_activity/repository/
-- (platform/queries.py loads them): the Session API's use cases, then its jobs', then a
-- user's data.
--
-- Every transition is one conditional statement guarded by the expected status
-- (... where status = 'Active'), so a race has one winner by construction.

-- === Starting and continuing a session (sessions.py; the heartbeat: heartbeats.py) ===

-- name: heartbeat_batch
-- INV-SES-003/006 for every device of a group commit: one conditional UPDATE, without
-- loading the aggregate; an Inactive session never matches. One row per device in
-- :anonymous_ids (the caller merged duplicates); greatest() keeps the activity time monotonic
-- across instances. It never waits on a row lock (SPEC §11): claimed takes the Active rows no
-- other transaction holds, and the statement also returns, with a null id, each device whose
-- Active row (as the statement's snapshot sees it) was not claimed (locked by another
-- transaction, or closed since) for the caller to extend on its own. That second read runs
-- only when something was left unclaimed.
with claimed as (
    select s.id, batch.at
    from unnest(:anonymous_ids::uuid[], :ats::timestamptz[]) as batch(anonymous_id, at)
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
where (select count(*) from claimed) < cardinality(:anonymous_ids::uuid[])
    and s.anonymous_id = any(:anonymous_ids::uuid[]) and s.status = 'Active'
    and not exists (select from claimed where claimed.id = s.id);

-- name: heartbeat_one
-- One device that the batch left out because another transaction held its row: the same
-- conditional UPDATE, waiting for that lock (bounded by the statement timeout). A row closed
-- meanwhile no longer matches, and the device has no Active session.
update user_activity.sessions
set last_activity_at = greatest(last_activity_at, :at)
where anonymous_id = :anonymous_id and status = 'Active'
returning id, last_activity_at;

-- name: continue_or_start_session
-- INV-SES-001/003 in one statement: continue the device's Active session or start one. The
-- partial unique index decides between racing starts: the losers extend the winner's session
-- instead (the caller learns which happened by comparing the returned id with the :id it
-- proposed). An Active session is only extended, whoever calls: only linking changes who is
-- on a device. A new session is the signed-in caller's (:user_id, signed in at
-- :signed_in_at) unless the device's latest link since that sign-in is another user's: then
-- it is a guest's. Linked, it is linked now and takes the instant of its user's latest
-- sign-in known on the device, the key later links are ordered by (select_latest_link_since).
-- A link that commits while this runs either made the device's Active session, which this
-- then extends, or waits for this session and judges it.
with latest_link as (
    select user_id, signed_in_at
    from user_activity.sessions
    where :user_id::uuid is not null and anonymous_id = :anonymous_id
      and signed_in_at > :signed_in_at::timestamptz
    order by signed_in_at desc, id desc
    limit 1
),
owner as (
    select :user_id::uuid as user_id,
           coalesce((select signed_in_at from latest_link), :signed_in_at::timestamptz)
               as signed_in_at
    where :user_id::uuid is not null
      and coalesce((select user_id from latest_link) = :user_id::uuid, true)
)
insert into user_activity.sessions
    (id, anonymous_id, user_id, linked_at, signed_in_at, status, created_at, last_activity_at,
     device_user_agent, device_type, device_os, device_browser, device_ip)
values (:id, :anonymous_id, (select user_id from owner), (select :now::timestamptz from owner),
        (select signed_in_at from owner), 'Active', :now, :now, :user_agent, :device_type, :os,
        :browser, :ip_address)
on conflict (anonymous_id) where status = 'Active'
do update set last_activity_at = greatest(sessions.last_activity_at, excluded.last_activity_at)
returning id, anonymous_id, user_id, linked_at, signed_in_at, status, created_at,
          last_activity_at;

-- === Linking a device's session to a user (linking.py) ===

-- name: insert_session
-- A linker's new session, of :user_id signed in at :signed_in_at and linked :now (all null
-- for a guest's): when the device already has an Active one, nothing is inserted and the
-- linker re-reads it (INV-SES-001).
insert into user_activity.sessions
    (id, anonymous_id, user_id, linked_at, signed_in_at, status, created_at, last_activity_at,
     device_user_agent, device_type, device_os, device_browser, device_ip)
values (:id, :anonymous_id, :user_id,
        case when :user_id::uuid is not null then :now::timestamptz end, :signed_in_at,
        'Active', :now, :now, :user_agent, :device_type, :os, :browser, :ip_address)
on conflict (anonymous_id) where status = 'Active' do nothing
returning id, anonymous_id, user_id, linked_at, signed_in_at, status, created_at,
          last_activity_at;

-- name: select_latest_link_since
-- The device's latest link standing for a sign-in later than :since, and whose. Every
-- signed_in_at is the instant of the sign-in its link stands for (a token's auth_time, a
-- sign-in event's SignedInAt), so this orders sign-ins whatever order their links arrived
-- in. Through ix_sessions_anonymous_id: one device's sessions, bounded by retention.
select user_id, signed_in_at
from user_activity.sessions
where anonymous_id = :anonymous_id and signed_in_at > :since
order by signed_in_at desc, id desc
limit 1;

-- name: lock_active_session
-- Link holds the device's Active session until it commits, so two users linking one device
-- at once are serialised and the second sees the first one's outcome: its next statement
-- (select_latest_link_since) reads the device's history with the first committed.
select id, anonymous_id, user_id, linked_at, signed_in_at, status, created_at,
       last_activity_at
from user_activity.sessions
where anonymous_id = :anonymous_id and status = 'Active'
for update;

-- name: link_session
-- INV-SES-002: user_id is set once, null → value; linked now, for a sign-in at
-- :signed_in_at. No row: the session is no longer Active (INV-SES-006).
update user_activity.sessions
set user_id = :user_id, linked_at = :now, signed_in_at = :signed_in_at
where id = :id and status = 'Active' and user_id is null
returning id, anonymous_id, user_id, linked_at, signed_in_at, status, created_at,
          last_activity_at;

-- name: insert_switched_session
-- The session that replaces a force-closed one (:replaced): same device, parsed once, new
-- user; started and linked :now, for the sign-in at :signed_in_at.
insert into user_activity.sessions
    (id, anonymous_id, user_id, linked_at, signed_in_at, status, created_at, last_activity_at,
     device_user_agent, device_type, device_os, device_browser, device_ip)
select :id, anonymous_id, :user_id, :now, :signed_in_at, 'Active', :now, :now,
       device_user_agent, device_type, device_os, device_browser, device_ip
from user_activity.sessions
where id = :replaced
returning id, anonymous_id, user_id, linked_at, signed_in_at, status, created_at,
          last_activity_at;

-- === Closing sessions (closing.py: link's force-close and ActivityCloserJob) ===

-- name: close_sessions
-- INV-SES-005: Active → Inactive with the duration computed in the same statement.
-- :idle_before lets the closer re-check idleness, so a heartbeat that committed first wins.
update user_activity.sessions
set status = 'Inactive', ended_at = :ended_at, duration = last_activity_at - created_at
where id = any(:ids::uuid[])
  and status = 'Active'
  and (:idle_before::timestamptz is null or last_activity_at < :idle_before)
returning id, anonymous_id, user_id, created_at, last_activity_at, duration;

-- name: close_open_views
-- INV-LV-007: open views of closed sessions end at the session's last activity, never
-- before they started.
update user_activity.property_object_views as v
set ended_at = greatest(s.last_activity_at, v.started_at),
    duration = greatest(s.last_activity_at, v.started_at) - v.started_at
from user_activity.sessions as s
where s.id = any(:session_ids::uuid[]) and v.session_id = s.id and v.ended_at is null
returning v.id, v.session_id, v.property_object_id, s.user_id, v.started_at, v.ended_at,
          v.duration;

-- === Recording actions and views (recording.py) ===

-- name: insert_action
-- An action, in the session it extended; user_id is the session's owner when it was written
-- (seed 003: a child keeps that snapshot, history goes through session ownership).
insert into user_activity.action_events
    (id, session_id, user_id, type, property_object_id, data, created_at)
values (:id, :session_id, :user_id, :type, :property_object_id, :data, :created_at);

-- name: insert_view
-- A view begins, open (no end, no duration), in the session it extended; user_id as for
-- actions.
insert into user_activity.property_object_views
    (id, session_id, property_object_id, user_id, started_at)
values (:id, :session_id, :property_object_id, :user_id, :started_at);

-- name: end_view
-- Ending is conditional on the view still being open and belonging to the caller's device,
-- so a repeated or racing end changes it once.
update user_activity.property_object_views as v
set ended_at = greatest(:ended_at, v.started_at),
    duration = greatest(:ended_at, v.started_at) - v.started_at
from user_activity.sessions as s
where v.id = :id and v.ended_at is null and s.id = v.session_id
  and s.anonymous_id = :anonymous_id
returning v.id, v.session_id, v.property_object_id, s.user_id, v.started_at, v.ended_at,
          v.duration;

-- name: select_view_on_device
-- A view end_view did not change: ended before (its duration), or not this device's (none).
select v.id, v.duration
from user_activity.property_object_views as v
join user_activity.sessions as s on s.id = v.session_id
where v.id = :id and s.anonymous_id = :anonymous_id;

-- --- Idempotency-Key (SPEC §8, idempotency.py) ---

-- name: reserve_idempotency_key
-- Reserve the device's key, or take over one created before :expired_before (its 24 hours are
-- over). A key another transaction holds makes this wait for that one to end: committed, this
-- returns no row and the caller reads the first answer; rolled back, this reserves it. So
-- racing repeats record once.
insert into user_activity.idempotency_keys (anonymous_id, key, request_hash, created_at)
values (:anonymous_id, :key, :request_hash, :created_at)
on conflict (anonymous_id, key) do update
set request_hash = excluded.request_hash, created_at = excluded.created_at, response = null
where idempotency_keys.created_at <= :expired_before
returning key;

-- name: issue_anonymous_id
-- The AnonymousId issued under a start's Idempotency-Key: :anonymous_id the first time, the
-- same id for every repeat within its lifetime (a key issued before :expired_before is taken
-- over, with a new id). One statement: a repeat racing the first waits on its uncommitted
-- row, then reads the id that row committed with.
insert into user_activity.issued_anonymous_ids as issued (key, anonymous_id, created_at)
values (:key, :anonymous_id, :now)
on conflict (key) do update
set anonymous_id = case when issued.created_at <= :expired_before
                        then excluded.anonymous_id else issued.anonymous_id end,
    created_at = case when issued.created_at <= :expired_before
                      then excluded.created_at else issued.created_at end
returning anonymous_id;

-- name: select_idempotency_key
-- The first request's fingerprint and answer, for a repeat of its key.
select request_hash, response
from user_activity.idempotency_keys
where anonymous_id = :anonymous_id and key = :key;

-- name: remember_idempotent_response
-- The answer joins its key in the transaction that reserved it: a repeat finds both or none.
update user_activity.idempotency_keys
set response = :response
where anonymous_id = :anonymous_id and key = :key;

-- === Reading: history pages, a device's link, sessions open now (history.py) ===

-- name: select_device_history
-- History pages: newest first; the cursor is the (created_at, id) of the last item seen (both
-- null for the first page). A guest sees only the device's unlinked sessions: a linked one
-- belongs to its user.
select id, anonymous_id, user_id, linked_at, status, created_at, last_activity_at, ended_at,
       duration, device_type, device_os, device_browser
from user_activity.sessions
where anonymous_id = :anonymous_id
  and user_id is null
  and (:after_created_at::timestamptz is null
       or (created_at, id) < (:after_created_at, :after_id::uuid))
order by created_at desc, id desc
limit :page_rows;

-- name: select_user_history
-- A user's pages, as the device's: every session linked to the user, with what happened in
-- it before the sign-in too.
select id, anonymous_id, user_id, linked_at, status, created_at, last_activity_at, ended_at,
       duration, device_type, device_os, device_browser
from user_activity.sessions
where user_id = :user_id
  and (:after_created_at::timestamptz is null
       or (created_at, id) < (:after_created_at, :after_id::uuid))
order by created_at desc, id desc
limit :page_rows;

-- name: select_history_actions
-- Children of a page of sessions, the latest :per_session of each: "before and after sign-in"
-- is assembled here, through session ownership, never by rewriting the children's user_id.
select session_id, id, user_id, type, property_object_id, data, created_at
from (
    select a.*, row_number() over (
        partition by a.session_id order by a.created_at desc, a.id desc
    ) as rank
    from user_activity.action_events as a
    where a.session_id = any(:session_ids::uuid[])
) as ranked
where rank <= :per_session
order by session_id, created_at, id;

-- name: select_history_views
-- The page's views, bounded per session as its actions are.
select session_id, id, user_id, property_object_id, started_at, ended_at, duration
from (
    select v.*, row_number() over (
        partition by v.session_id order by v.started_at desc, v.id desc
    ) as rank
    from user_activity.property_object_views as v
    where v.session_id = any(:session_ids::uuid[])
) as ranked
where rank <= :per_session
order by session_id, started_at, id;

-- name: count_open_sessions
-- Sessions open right now, every device's as dev-stats counts every closed one (each close
-- publishes session-ended); through the partial index of Active sessions.
select count(*) from user_activity.sessions
where status = 'Active';

-- name: select_device_link
-- The device's current link: its latest session.
select anonymous_id, user_id, linked_at
from user_activity.sessions
where anonymous_id = :anonymous_id
order by created_at desc, id desc
limit 1;

-- === ActivityCloserJob (seed 004, jobs/activity_closer.py) ===

-- name: claim_idle_sessions
-- Through ix_sessions_active_last_activity, oldest activity first; SKIP LOCKED leaves
-- sessions another closer or a linker holds to them.
select id from user_activity.sessions
where status = 'Active' and last_activity_at < :idle_before
order by last_activity_at
limit :batch_size
for update skip locked;

-- name: count_idle_sessions
-- The backlog left for the next run: idle sessions still Active after this one.
select count(*) from user_activity.sessions
where status = 'Active' and last_activity_at < :idle_before;

-- === ActivityRetentionJob (seed 003, jobs/activity_retention.py) ===

-- name: claim_retired_sessions
-- Through ix_sessions_retention_created_at, oldest first; SKIP LOCKED leaves a batch another
-- instance holds to it.
select id from user_activity.sessions
where status = 'Inactive' and created_at < :created_before
order by created_at
limit :batch_size
for update skip locked;

-- name: delete_retired_actions
-- The claimed sessions' actions go first: they reference their session ON DELETE RESTRICT.
delete from user_activity.action_events where session_id = any(:session_ids::uuid[]);

-- name: delete_retired_views
-- Then their views, the other children.
delete from user_activity.property_object_views where session_id = any(:session_ids::uuid[]);

-- name: delete_retired_sessions
-- Then the sessions; an Inactive one never changes again (INV-SES-006), so it gained no child
-- since the claim.
delete from user_activity.sessions where id = any(:session_ids::uuid[]) and status = 'Inactive';

-- name: delete_expired_idempotency_keys
-- Keys created before :expired_before (past their 24 hours), a bounded batch of each kind at a
-- time: the actions' and views' reservations and the AnonymousIds issued to starts. SKIP
-- LOCKED leaves a key a request is taking over. The total is short of :batch_size only when
-- both tables are.
with reservations as (
    delete from user_activity.idempotency_keys
    where (anonymous_id, key) in (
        select anonymous_id, key from user_activity.idempotency_keys
        where created_at <= :expired_before
        order by created_at
        limit :batch_size
        for update skip locked
    )
    returning 1
), issued as (
    delete from user_activity.issued_anonymous_ids
    where key in (
        select key from user_activity.issued_anonymous_ids
        where created_at <= :expired_before
        order by created_at
        limit :batch_size
        for update skip locked
    )
    returning 1
)
select (select count(*) from reservations) + (select count(*) from issued);

-- === A user's data: the export (SPEC §10) ===

-- name: export_sessions_page
-- Export pages, by key after :after_created_at/:after_id, :page_rows at a time (keyset_rows
-- fills the three). The key's first column bounded on its own too: that is what the index
-- can seek to.
select id, anonymous_id, user_id, linked_at, status, created_at, last_activity_at, ended_at,
       duration, device_user_agent, device_type, device_os, device_browser, device_ip
from user_activity.sessions
where user_id = :user_id and created_at >= :after_created_at
  and (created_at, id) > (:after_created_at, :after_id)
order by created_at, id
limit :page_rows;

-- name: export_views_page
-- A session's views, a page at a time as its sessions are, by (started_at, id).
select id, property_object_id, user_id, started_at, ended_at, duration
from user_activity.property_object_views
where session_id = :session_id and started_at >= :after_started_at
  and (started_at, id) > (:after_started_at, :after_id)
order by started_at, id
limit :page_rows;

-- name: export_actions_page
-- A session's actions, a page at a time, by (created_at, id).
select id, user_id, type, property_object_id, data, created_at
from user_activity.action_events
where session_id = :session_id and created_at >= :after_created_at
  and (created_at, id) > (:after_created_at, :after_id)
order by created_at, id
limit :page_rows;

-- === A user's erasure (SPEC §10, user_data.py) ===

-- name: select_erased
-- The tombstone (platform/erasure.py): its key is the id's digest, never the id.
select exists (select 1 from user_activity.erased_users where user_digest = :user_digest);

-- name: insert_erased
-- The tombstone, once: an erasure run again finds it in place.
insert into user_activity.erased_users (user_digest, erased_at)
values (:user_digest, :erased_at)
on conflict (user_digest) do nothing;

-- name: lock_erased_user_active_sessions
-- The erased user's Active sessions, locked so that no heartbeat, link or closer changes them
-- before they go in this transaction. A closer that holds one first finishes its close (with
-- its session-ended, as any close has); this statement then no longer finds it Active, and
-- the batches below delete it with the rest.
select id from user_activity.sessions
where user_id = :user_id and status = 'Active'
for update;

-- name: delete_active_session_actions
-- The locked Active sessions' actions: their children go first (ON DELETE RESTRICT).
delete from user_activity.action_events where session_id = any(:session_ids::uuid[]);

-- name: delete_active_session_views
-- The locked Active sessions' views, the other children.
delete from user_activity.property_object_views where session_id = any(:session_ids::uuid[]);

-- name: delete_active_sessions
-- Deleted, never closed: a session is closed by the closer or a link alone, and a deleted one
-- publishes nothing. A device that comes back starts a new session.
delete from user_activity.sessions where id = any(:session_ids::uuid[]);

-- name: delete_erased_user_actions
-- One bounded batch of the user's actions: children go first, since they reference their
-- session ON DELETE RESTRICT.
delete from user_activity.action_events where id in (
    select a.id
    from user_activity.sessions as s
    join user_activity.action_events as a on a.session_id = s.id
    where s.user_id = :user_id
    limit :batch_size
);

-- name: delete_erased_user_views
-- One bounded batch of the user's property views, the other children.
delete from user_activity.property_object_views where id in (
    select v.id
    from user_activity.sessions as s
    join user_activity.property_object_views as v on v.session_id = s.id
    where s.user_id = :user_id
    limit :batch_size
);

-- name: delete_erased_user_sessions
-- One bounded batch of the user's sessions, once their children are gone.
delete from user_activity.sessions where id in (
    select id from user_activity.sessions where user_id = :user_id limit :batch_size
);

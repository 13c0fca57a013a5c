-- identity's statements (SPEC §3 tables), run through identity/repository/ (platform/queries.py
-- loads them): its use cases', then its jobs', the Bearer liveness check's, the signing keys'
-- and the service clients'.
--
-- Every transition is one conditional UPDATE guarded by the expected status, so a race has
-- one winner by construction and the loser sees zero rows.

-- === Sign-in requests (POST /api/identity/sign-in, /confirm) ===

-- name: lock_sign_in_requests
-- Every sign-in request of the service queues here until its transaction ends, so the limit
-- counts stay true until its insert commits. The service-wide limit needs one queue anyway;
-- each holder counts through three index probes and inserts one row. Two-key advisory locks
-- live in their own keyspace: :lock_class names the use.
select pg_advisory_xact_lock(:lock_class::int, 0);

-- name: sign_in_request_limit_edges
-- For each limit, the n-th newest request inside its window (OFFSET n - 1): null while there
-- are fewer; at the limit, the next request fits once this one leaves the window. A null
-- :ip_network matches no row, so requests of unknown origin skip that limit.
select
    (select created_at from identity.sign_in_confirmation_requests
     where phone_number = :phone_number and created_at > :phone_since
     order by created_at desc offset :phone_offset limit 1) as phone,
    (select created_at from identity.sign_in_confirmation_requests
     where ip_network = :ip_network and created_at > :address_since
     order by created_at desc offset :address_offset limit 1) as address,
    (select created_at from identity.sign_in_confirmation_requests
     where created_at > :service_since
     order by created_at desc offset :service_offset limit 1) as service;

-- name: insert_sign_in_request
-- A new Pending request; its code is stored only as a hash.
insert into identity.sign_in_confirmation_requests
    (id, phone_number, code_hash, attempts, status, created_at, expires_at, ip_address,
     ip_network)
values (:id, :phone_number, :code_hash, 0, 'Pending', :created_at, :expires_at, :ip_address,
        :ip_network);

-- name: delete_unsent_sign_in_request
-- The code never reached the gateway: the request goes as if never made, so it counts
-- against no limit and cannot be confirmed. Only while still Pending: a request someone
-- confirmed was evidently delivered.
delete from identity.sign_in_confirmation_requests
where id = :id and status = 'Pending';

-- name: sign_in_request_exists
-- Tells an unknown request from one whose code is wrong.
select exists (select 1 from identity.sign_in_confirmation_requests where id = :id);

-- name: confirm_sign_in_request
-- Pending → Confirmed, only with the right code, in time, and under the attempt cap.
update identity.sign_in_confirmation_requests
set status = 'Confirmed', confirmed_at = :now, version = version + 1
where id = :id and code_hash = :code_hash
  and status = 'Pending' and expires_at > :now and attempts < :max_attempts
returning phone_number;

-- name: count_wrong_code
-- One wrong guess uses one attempt. The row lock makes parallel guesses queue, and each
-- re-checks `attempts < cap` after the previous commit, so the cap is never exceeded.
update identity.sign_in_confirmation_requests
set attempts = attempts + 1, version = version + 1
where id = :id and code_hash <> :code_hash
  and status = 'Pending' and expires_at > :now and attempts < :max_attempts
returning attempts;

-- name: select_sign_in_request_state
-- Why a confirmation failed: its status, expiry and attempts as they are now.
select status, expires_at, attempts
from identity.sign_in_confirmation_requests
where id = :id;

-- === Users and their permissions ===

-- name: insert_user_if_new
-- A phone's first confirmed sign-in creates its user; a later one, or a racing first one,
-- inserts nothing and returns no row.
insert into identity.users (id, phone_number, created_at)
values (:id, :phone_number, :created_at)
on conflict (phone_number) do nothing
returning id;

-- name: select_user_id_by_phone
-- The phone's user, when it has one.
select id from identity.users where phone_number = :phone_number;

-- name: select_user_permissions
-- What the access tokens of the user carry, in a stable order.
select permission from identity.user_permissions where user_id = :user_id order by permission;

-- name: insert_user_permission
-- A grant; granting twice changes nothing.
insert into identity.user_permissions (user_id, permission, granted_at)
values (:user_id, :permission, :granted_at)
on conflict (user_id, permission) do nothing;

-- name: delete_user_permission
-- A withdrawal; withdrawing what was never granted changes nothing.
delete from identity.user_permissions where user_id = :user_id and permission = :permission;

-- === Refresh sessions (sign-in, refresh, logout, the device list) ===

-- name: insert_refresh_session
-- A new Active session. :signed_in_at is the instant of the sign-in that started the family
-- (the access tokens' auth_time).
insert into identity.refresh_sessions
    (id, user_id, family_id, token_hash, status, created_at, expires_at, last_used_at,
     device_user_agent, device_ip, signed_in_at)
values (:id, :user_id, :family_id, :token_hash, 'Active', :created_at, :expires_at, :created_at,
        :device_user_agent, :device_ip, :signed_in_at);

-- name: rotate_refresh_session
-- Active → Rotated; the successor row, on the same device, is inserted in the same
-- transaction and keeps the family's sign-in instant. A session of a family begun before
-- migration 0016 has none stored: its family's first session was created by that sign-in,
-- and while retention has not removed it its created_at is the instant; after that, the
-- session's own created_at is the latest the sign-in can have been.
update identity.refresh_sessions as s
set status = 'Rotated', rotated_at = :now, replaced_by = :successor_id, last_used_at = :now,
    version = s.version + 1
where s.token_hash = :token_hash and s.status = 'Active' and s.expires_at > :now
returning s.user_id, s.family_id, s.device_user_agent,
    coalesce(
        s.signed_in_at,
        (select f.created_at from identity.refresh_sessions as f where f.id = s.family_id),
        s.created_at
    ) as signed_in_at;

-- name: select_refresh_session_by_hash
-- Why a refresh failed (reuse, expiry, revocation); the sign-in instant as
-- rotate_refresh_session reads it.
select s.id, s.user_id, s.family_id, s.status, s.expires_at, s.rotated_at, s.replaced_by,
    coalesce(
        s.signed_in_at,
        (select f.created_at from identity.refresh_sessions as f where f.id = s.family_id),
        s.created_at
    ) as signed_in_at
from identity.refresh_sessions as s
where s.token_hash = :token_hash;

-- name: select_refresh_session_by_id
-- A session by its id (logout, revoke by id), read as select_refresh_session_by_hash reads it.
select s.id, s.user_id, s.family_id, s.status, s.expires_at, s.rotated_at, s.replaced_by,
    coalesce(
        s.signed_in_at,
        (select f.created_at from identity.refresh_sessions as f where f.id = s.family_id),
        s.created_at
    ) as signed_in_at
from identity.refresh_sessions as s
where s.id = :id;

-- name: revoke_family
-- Reuse detected: every Active session of the family → Revoked(TokenReuse).
update identity.refresh_sessions
set status = 'Revoked', revoked_at = :now, revoked_reason = 'TokenReuse', version = version + 1
where family_id = :family_id and status = 'Active'
returning id, user_id;

-- name: revoke_user_session
-- Active → Revoked for one session of one user (logout, revoke by id).
update identity.refresh_sessions
set status = 'Revoked', revoked_at = :now, revoked_reason = :reason, version = version + 1
where id = :id and user_id = :user_id and status = 'Active' and expires_at > :now
returning id, user_id;

-- name: revoke_other_user_sessions
-- Active → Revoked for every other live session of one user.
update identity.refresh_sessions
set status = 'Revoked', revoked_at = :now, revoked_reason = 'RevokedByUser',
    version = version + 1
where user_id = :user_id and id <> :keep_id and status = 'Active' and expires_at > :now
returning id, user_id;

-- name: select_live_user_sessions
-- The device list: live sessions only; an Active row past expiry is already gone (seed 000).
select id, status, created_at, last_used_at, expires_at, device_user_agent
from identity.refresh_sessions
where user_id = :user_id and status = 'Active' and expires_at > :now
order by last_used_at desc, id desc;

-- === Bearer liveness (platform.auth.SessionLiveness) ===

-- name: select_session_is_live
-- Lazy TTL check (seed 000): an Active row past expires_at is not live, whether or not
-- ExpireSessionsJob has flipped it yet.
select exists (
    select 1
    from identity.refresh_sessions
    where id = :id and user_id = :user_id and status = 'Active' and expires_at > :now
);

-- === ExpireSessionsJob (seed 000) ===
-- Every flip returns the expires_at of the rows it flipped (`expired`): the job measures
-- their lag, seed 000's materialisation SLO.

-- name: count_expired_refresh_sessions
-- The refresh phase's backlog, through the partial index ix_refresh_sessions_expires_at.
select count(*) from identity.refresh_sessions
where status = 'Active' and expires_at <= :now;

-- name: oldest_expired_refresh_session
-- The first entry of ix_refresh_sessions_expires_at (min over the partial index's key is
-- one read at its start), or null when no row under the guard is past :now.
select min(expires_at) from identity.refresh_sessions
where status = 'Active' and expires_at <= :now;

-- name: expire_refresh_sessions
-- A backlog of one batch or less: one set-based flip.
with flipped as (
    update identity.refresh_sessions set status = 'Expired'
    where status = 'Active' and expires_at <= :now
    returning expires_at
)
select array_agg(expires_at) as expired from flipped;

-- name: expire_refresh_sessions_chunk
-- One chunk (a KeysetCursor): claim a portion through ix_refresh_sessions_expires_at,
-- starting at :reached where the previous chunk ended (so no chunk rescans the index entries
-- its predecessors left behind), and flip it. SKIP LOCKED leaves rows another instance holds
-- to that instance. The claim takes FOR NO KEY UPDATE, the very row lock a status UPDATE
-- takes: claiming FOR UPDATE and then updating would make PostgreSQL record both lock modes
-- in a MultiXact for every row, which halves the chunk's speed. The UPDATE addresses the
-- claimed (locked, hence unmoved) row versions by ctid: a TID scan, where a join on id could
-- turn into a scan of the whole table.
with portion as (
    select ctid as row_ctid from identity.refresh_sessions
    where status = 'Active' and expires_at <= :bound and expires_at >= :reached
    order by expires_at
    limit :batch_size
    for no key update skip locked
),
flipped as (
    update identity.refresh_sessions set status = 'Expired'
    where ctid = any(array(select row_ctid from portion))
      and status = 'Active' and expires_at <= :bound
    returning expires_at
)
select count(*) as flipped, max(expires_at) as reached, array_agg(expires_at) as expired
from flipped;

-- name: count_expired_sicr
-- The sicr phase's backlog, through the partial index ix_sicr_expires_at.
select count(*) from identity.sign_in_confirmation_requests
where status = 'Pending' and expires_at <= :now;

-- name: oldest_expired_sicr
-- The first entry of ix_sicr_expires_at, like oldest_expired_refresh_session.
select min(expires_at) from identity.sign_in_confirmation_requests
where status = 'Pending' and expires_at <= :now;

-- name: expire_sicr
-- A backlog of one batch or less: one set-based flip.
with flipped as (
    update identity.sign_in_confirmation_requests set status = 'Expired'
    where status = 'Pending' and expires_at <= :now
    returning expires_at
)
select array_agg(expires_at) as expired from flipped;

-- name: expire_sicr_chunk
-- Claimed through ix_sicr_expires_at, like expire_refresh_sessions_chunk.
with portion as (
    select ctid as row_ctid from identity.sign_in_confirmation_requests
    where status = 'Pending' and expires_at <= :bound and expires_at >= :reached
    order by expires_at
    limit :batch_size
    for no key update skip locked
),
flipped as (
    update identity.sign_in_confirmation_requests set status = 'Expired'
    where ctid = any(array(select row_ctid from portion))
      and status = 'Pending' and expires_at <= :bound
    returning expires_at
)
select count(*) as flipped, max(expires_at) as reached, array_agg(expires_at) as expired
from flipped;

-- name: set_lock_timeout
-- How long a job's statements wait for a row lock on this connection (a session setting,
-- so reset_lock_timeout puts it back before the pool has the connection again).
select set_config('lock_timeout', :lock_timeout, false);

-- name: reset_lock_timeout
-- The server's lock_timeout again.
reset lock_timeout;

-- === SessionRetentionJob ===
-- Each batch claims rows through a partial index from :reached where the previous batch
-- ended (a KeysetCursor), and deletes the claimed (locked, hence unmoved) row versions by
-- ctid: see expire_refresh_sessions_chunk for why.

-- name: delete_retired_sicr_batch
-- Confirmed and Expired requests created before :bound, through ix_sicr_retention_created_at.
with doomed as (
    select ctid as row_ctid from identity.sign_in_confirmation_requests
    where status in ('Confirmed', 'Expired') and created_at < :bound and created_at >= :reached
    order by created_at
    limit :batch_size
    for update skip locked
),
deleted as (
    delete from identity.sign_in_confirmation_requests
    where ctid = any(array(select row_ctid from doomed))
      and status in ('Confirmed', 'Expired')
    returning created_at
)
select count(*) as deleted, max(created_at) as reached from deleted;

-- name: delete_retired_refresh_sessions_batch
-- Rotated, Revoked and Expired sessions created before :bound, through
-- ix_refresh_sessions_retention_created_at.
with doomed as (
    select ctid as row_ctid from identity.refresh_sessions
    where status in ('Rotated', 'Revoked', 'Expired')
      and created_at < :bound and created_at >= :reached
    order by created_at
    limit :batch_size
    for update skip locked
),
deleted as (
    delete from identity.refresh_sessions
    where ctid = any(array(select row_ctid from doomed))
      and status in ('Rotated', 'Revoked', 'Expired')
    returning created_at
)
select count(*) as deleted, max(created_at) as reached from deleted;

-- === A user's data: export and erasure (SPEC §10) ===

-- name: select_user
-- The user row: the phone number the erasure deletes with it, and the export's head.
select id, phone_number, created_at from identity.users where id = :id;

-- name: select_erasure
-- The proof of an erasure: the user id (no phone), when and by whom.
select user_id, requested_at, requested_by, message_id
from identity.erasures
where user_id = :user_id;

-- name: revoke_all_user_sessions
-- Every still-live session ends as a revoke does (session-revoked is published), then every
-- session of the user goes.
update identity.refresh_sessions
set status = 'Revoked', revoked_at = :now, revoked_reason = :reason, version = version + 1
where user_id = :user_id and status = 'Active' and expires_at > :now
returning id, user_id;

-- name: delete_user_sessions
-- Every session of the user, whatever its status.
delete from identity.refresh_sessions where user_id = :user_id;

-- name: delete_phone_sign_in_requests
-- The phone's sign-in requests: they hold the phone number.
delete from identity.sign_in_confirmation_requests where phone_number = :phone_number;

-- name: delete_user_permissions
-- The user's grants.
delete from identity.user_permissions where user_id = :user_id;

-- name: delete_user
-- Last, once nothing of the user is left: a session opened meanwhile fails the foreign key.
delete from identity.users where id = :id returning id;

-- name: insert_erasure
-- The proof, written in the erasure's transaction beside the user-erased event.
insert into identity.erasures (user_id, requested_at, requested_by, message_id)
values (:user_id, :requested_at, :requested_by, :message_id);

-- name: select_user_permission_grants
-- The export's permissions, with when each was granted.
select permission, granted_at from identity.user_permissions
where user_id = :user_id
order by permission;

-- name: export_sign_in_requests_page
-- One export page, by (created_at, id) after the key given, :page_rows rows at most. The
-- key's first column is bounded on its own too: that is what the index can seek to. The
-- last three parameters are the page's (platform.streamed_json.keyset_rows fills them).
select id, status, created_at, expires_at, confirmed_at, attempts, ip_address
from identity.sign_in_confirmation_requests
where phone_number = :phone_number and created_at >= :after_created_at
  and (created_at, id) > (:after_created_at, :after_id)
order by created_at, id
limit :page_rows;

-- name: export_refresh_sessions_page
-- One export page of the user's sessions, like export_sign_in_requests_page.
select id, family_id, status, created_at, last_used_at, expires_at, rotated_at, revoked_at,
       revoked_reason, signed_in_at, device_user_agent, device_ip
from identity.refresh_sessions
where user_id = :user_id and created_at >= :after_created_at
  and (created_at, id) > (:after_created_at, :after_id)
order by created_at, id
limit :page_rows;

-- === Signing keys (SPEC §8) ===

-- name: lock_signing_keys
-- One transaction at a time decides about the keys: the job, `keys rotate` and a first
-- signer on an empty table (the unique indexes back this up).
select pg_advisory_xact_lock(:lock_class::int, 0);

-- name: select_signing_keys
-- Every key's state, oldest first: what the rotation plan decides from.
select kid, status, created_at, activated_at, retired_at
from identity.signing_keys
order by created_at, kid;

-- name: select_public_jwks
-- The JWKS: every key a live token may name, oldest first.
select public_jwk
from identity.signing_keys
order by created_at, kid;

-- name: select_current_signing_key
-- The key that signs now, sealed.
select kid, private_key
from identity.signing_keys
where status = 'Current';

-- name: insert_signing_key
-- :status 'Current' (activated at once) or 'Next'; a second key of either status does
-- nothing.
insert into identity.signing_keys (kid, public_jwk, private_key, status, created_at, activated_at)
values (:kid, :public_jwk::jsonb, :private_key, :status::varchar, :created_at::timestamptz,
        case when :status::varchar = 'Current' then :created_at::timestamptz end)
on conflict do nothing;

-- name: retire_current_signing_key
-- Current → Retired, as its Next key is promoted in the same transaction.
update identity.signing_keys
set status = 'Retired', retired_at = :now, version = version + 1
where status = 'Current'
returning kid;

-- name: promote_signing_key
-- Next → Current.
update identity.signing_keys
set status = 'Current', activated_at = :now, version = version + 1
where kid = :kid and status = 'Next';

-- name: delete_signing_keys
-- Retired keys no live token can name any more.
delete from identity.signing_keys where kid = any(:kids::text[]);

-- name: delete_unretired_signing_keys
-- `keys rotate --now`: the leaked key, and a waiting one, go at once.
delete from identity.signing_keys where status in ('Current', 'Next')
returning kid;

-- === Service clients (SPEC §8) ===

-- name: insert_client
-- A new Active client; its secret is stored only as a hash.
insert into identity.clients
    (client_id, name, secret_hash, scopes, status, created_at, updated_at)
values (:client_id, :name, :secret_hash, :scopes, 'Active', :now, :now);

-- name: select_clients
-- `clients list`, oldest first.
select client_id, name, scopes, status, created_at, updated_at
from identity.clients
order by created_at, client_id;

-- name: select_client_credentials
-- The client (:client_id null or unknown: no client columns) and the recent failures of its
-- id (:client_key) and of the caller's address (:address_key). One statement, so a
-- successful authentication costs no round trip more than reading the client did.
select c.client_id, c.name, c.scopes, c.status, c.created_at, c.updated_at, c.secret_hash,
    (select f.failed_at from identity.client_authentication_failures as f
     where f.key = :client_key) as client_failures,
    (select f.failed_at from identity.client_authentication_failures as f
     where f.key = :address_key) as address_failures
from (select) as one
left join identity.clients as c on c.client_id = :client_id;

-- name: select_client
-- An operator's lookup by id (`token m2m`): no credentials are judged, so no failure counts.
select client_id, name, scopes, status, created_at, updated_at
from identity.clients
where client_id = :client_id;

-- name: select_client_named
-- An operator's lookup by name, which ux_clients_name keeps unique.
select client_id, name, scopes, status, created_at, updated_at
from identity.clients
where name = :name;

-- name: rotate_client_credentials
-- A new secret for an Active client; the old one stops working with this commit.
update identity.clients
set secret_hash = :secret_hash, secret_rotated_at = :now, updated_at = :now,
    version = version + 1
where client_id = :client_id and status = 'Active'
returning client_id;

-- name: disable_client
-- Active → Disabled.
update identity.clients
set status = 'Disabled', disabled_at = :now, updated_at = :now, version = version + 1
where client_id = :client_id and status = 'Active'
returning client_id;

-- name: select_client_status
-- Why a change matched nothing: unknown (no row) or not Active.
select status from identity.clients where client_id = :client_id;

-- name: select_disabled_client_ids
-- The copy of disabled clients every process keeps (identity.clients.DisabledClients).
select client_id from identity.clients where status = 'Disabled';

-- === Client authentication failures (SPEC §11) ===

-- name: record_client_authentication_failure
-- One failure, for each of its :keys (the client id's, then the address's — always in that
-- order, so two failures never wait on each other in a cycle), at :failed_at. On the locked
-- row it judges whether the limit (:failure_limit failures after :window_start) was already
-- reached, keeps the newest :failure_limit failures of the window, and returns the verdict
-- with them.
insert into identity.client_authentication_failures as f
    (key, failed_at, last_failed_at, last_refused)
select key, array[:failed_at::timestamptz], :failed_at, false
from unnest(:keys::text[]) with ordinality as keys (key, position)
order by position
on conflict (key) do update set
    last_refused = (
        select count(*) >= :failure_limit from unnest(f.failed_at) as t where t > :window_start
    ),
    failed_at = array(
        select t from (
            select t from unnest(f.failed_at || :failed_at::timestamptz) as t
            where t > :window_start
            order by t desc
            limit :failure_limit
        ) as newest
        order by t
    ),
    last_failed_at = :failed_at
returning key, failed_at, last_refused;

-- name: delete_expired_client_authentication_failures
-- Rows whose last failure left the window (:window_start), oldest first; rows a failure
-- holds are skipped, never waited for. Its own statement: held beside an upsert, these row
-- locks could close a cycle with another failure's.
delete from identity.client_authentication_failures
where key in (
    select key from identity.client_authentication_failures
    where last_failed_at <= :window_start
    order by last_failed_at
    limit :batch_size
    for update skip locked
);

"""Every statement of the identity context, named (SPEC §3 tables): its use cases', then
its jobs' and the Bearer liveness check's. Nothing else in the context holds SQL.

Every transition is one conditional UPDATE guarded by the expected status, so a race
has one winner by construction and the loser sees zero rows.
"""

from __future__ import annotations

# Two-key advisory locks live in their own keyspace; this first key names the use.
SIGN_IN_REQUEST_LOCK_CLASS = 0x51C2  # "SICR"

# Every sign-in request of the service queues here until its transaction ends, so the
# counts below stay true until its insert commits. The service-wide limit needs one queue
# anyway; each holder counts through three index probes and inserts one row.
LOCK_SIGN_IN_REQUESTS = """
select pg_advisory_xact_lock($1::int, 0)
"""

# For each limit, the n-th newest request inside its window (OFFSET n - 1): null while
# there are fewer; at the limit, the next request fits once this one leaves the window.
# A null address ($4) matches no row, so requests of unknown origin skip that limit.
SIGN_IN_REQUEST_LIMIT_EDGES = """
select
    (select created_at from identity.sign_in_confirmation_requests
     where phone_number = $1 and created_at > $2
     order by created_at desc offset $3 limit 1) as phone,
    (select created_at from identity.sign_in_confirmation_requests
     where ip_network = $4 and created_at > $5
     order by created_at desc offset $6 limit 1) as address,
    (select created_at from identity.sign_in_confirmation_requests
     where created_at > $7
     order by created_at desc offset $8 limit 1) as service
"""

INSERT_SIGN_IN_REQUEST = """
insert into identity.sign_in_confirmation_requests
    (id, phone_number, code_hash, attempts, status, created_at, expires_at, ip_address,
     ip_network)
values ($1, $2, $3, 0, 'Pending', $4, $5, $6, $7)
"""

# The code never reached the gateway: the request goes as if never made, so it counts
# against no limit and cannot be confirmed. Only while still Pending: a request someone
# confirmed was evidently delivered.
DELETE_UNSENT_SIGN_IN_REQUEST = """
delete from identity.sign_in_confirmation_requests
where id = $1 and status = 'Pending'
"""

SIGN_IN_REQUEST_EXISTS = """
select exists (select 1 from identity.sign_in_confirmation_requests where id = $1)
"""

# Pending → Confirmed, only with the right code, in time, and under the attempt cap.
CONFIRM_SIGN_IN_REQUEST = """
update identity.sign_in_confirmation_requests
set status = 'Confirmed', confirmed_at = $3, version = version + 1
where id = $1 and code_hash = $2
  and status = 'Pending' and expires_at > $3 and attempts < $4
returning phone_number
"""

# One wrong guess uses one attempt. The row lock makes parallel guesses queue, and each
# re-checks `attempts < cap` after the previous commit, so the cap is never exceeded.
COUNT_WRONG_CODE = """
update identity.sign_in_confirmation_requests
set attempts = attempts + 1, version = version + 1
where id = $1 and code_hash <> $2
  and status = 'Pending' and expires_at > $3 and attempts < $4
returning attempts
"""

SELECT_SIGN_IN_REQUEST_STATE = """
select status, expires_at, attempts
from identity.sign_in_confirmation_requests
where id = $1
"""

INSERT_USER_IF_NEW = """
insert into identity.users (id, phone_number, created_at)
values ($1, $2, $3)
on conflict (phone_number) do nothing
returning id
"""

SELECT_USER_ID_BY_PHONE = """
select id from identity.users where phone_number = $1
"""

SELECT_USER_PERMISSIONS = """
select permission from identity.user_permissions where user_id = $1 order by permission
"""

INSERT_USER_PERMISSION = """
insert into identity.user_permissions (user_id, permission, granted_at)
values ($1, $2, $3)
on conflict (user_id, permission) do nothing
"""

DELETE_USER_PERMISSION = """
delete from identity.user_permissions where user_id = $1 and permission = $2
"""

# $9: the instant of the sign-in that started the family (the access tokens' auth_time).
INSERT_REFRESH_SESSION = """
insert into identity.refresh_sessions
    (id, user_id, family_id, token_hash, status, created_at, expires_at, last_used_at,
     device_user_agent, device_ip, signed_in_at)
values ($1, $2, $3, $4, 'Active', $5, $6, $5, $7, $8, $9)
"""

# Active → Rotated; the successor row, on the same device, is inserted in the same
# transaction and keeps the family's sign-in instant. A session of a family begun before
# migration 0016 has none stored: its family's first session was created by that sign-in,
# and while retention has not removed it its created_at is the instant; after that, the
# session's own created_at is the latest the sign-in can have been.
ROTATE_REFRESH_SESSION = """
update identity.refresh_sessions as s
set status = 'Rotated', rotated_at = $2, replaced_by = $3, last_used_at = $2,
    version = s.version + 1
where s.token_hash = $1 and s.status = 'Active' and s.expires_at > $2
returning s.user_id, s.family_id, s.device_user_agent,
    coalesce(
        s.signed_in_at,
        (select f.created_at from identity.refresh_sessions as f where f.id = s.family_id),
        s.created_at
    ) as signed_in_at
"""

# The sign-in instant as ROTATE_REFRESH_SESSION reads it.
SELECT_REFRESH_SESSION_BY_HASH = """
select s.id, s.user_id, s.family_id, s.status, s.expires_at, s.rotated_at, s.replaced_by,
    coalesce(
        s.signed_in_at,
        (select f.created_at from identity.refresh_sessions as f where f.id = s.family_id),
        s.created_at
    ) as signed_in_at
from identity.refresh_sessions as s
where s.token_hash = $1
"""

SELECT_REFRESH_SESSION_BY_ID = """
select s.id, s.user_id, s.family_id, s.status, s.expires_at, s.rotated_at, s.replaced_by,
    coalesce(
        s.signed_in_at,
        (select f.created_at from identity.refresh_sessions as f where f.id = s.family_id),
        s.created_at
    ) as signed_in_at
from identity.refresh_sessions as s
where s.id = $1
"""

# Reuse detected: every Active session of the family → Revoked(TokenReuse).
REVOKE_FAMILY = """
update identity.refresh_sessions
set status = 'Revoked', revoked_at = $2, revoked_reason = 'TokenReuse', version = version + 1
where family_id = $1 and status = 'Active'
returning id, user_id
"""

# Active → Revoked for one session of one user (logout, revoke by id).
REVOKE_USER_SESSION = """
update identity.refresh_sessions
set status = 'Revoked', revoked_at = $3, revoked_reason = $4, version = version + 1
where id = $1 and user_id = $2 and status = 'Active' and expires_at > $3
returning id, user_id
"""

# Active → Revoked for every other live session of one user.
REVOKE_OTHER_USER_SESSIONS = """
update identity.refresh_sessions
set status = 'Revoked', revoked_at = $3, revoked_reason = 'RevokedByUser',
    version = version + 1
where user_id = $1 and id <> $2 and status = 'Active' and expires_at > $3
returning id, user_id
"""

# The device list: live sessions only; an Active row past expiry is already gone (seed 000).
SELECT_LIVE_USER_SESSIONS = """
select id, status, created_at, last_used_at, expires_at, device_user_agent
from identity.refresh_sessions
where user_id = $1 and status = 'Active' and expires_at > $2
order by last_used_at desc, id desc
"""


# --- ExpireSessionsJob (seed 000) ----------------------------------------------------------

# Every flip returns the expires_at of the rows it flipped (``expired``): the job measures
# their lag, seed 000's materialisation SLO.

COUNT_EXPIRED_REFRESH_SESSIONS = """
select count(*) from identity.refresh_sessions
where status = 'Active' and expires_at <= $1
"""

# The first entry of ix_refresh_sessions_expires_at (min over the partial index's key is
# one read at its start), or null when no row under the guard is past $1.
OLDEST_EXPIRED_REFRESH_SESSION = """
select min(expires_at) from identity.refresh_sessions
where status = 'Active' and expires_at <= $1
"""

EXPIRE_REFRESH_SESSIONS = """
with flipped as (
    update identity.refresh_sessions set status = 'Expired'
    where status = 'Active' and expires_at <= $1
    returning expires_at
)
select array_agg(expires_at) as expired from flipped
"""

# One chunk: claim a portion through ix_refresh_sessions_expires_at, starting at the
# cursor $3 where the previous chunk ended (a KeysetCursor, so no chunk rescans the
# index entries its predecessors left behind), and flip it. SKIP LOCKED leaves rows
# another instance holds to that instance. The claim takes FOR NO KEY UPDATE, the very
# row lock a status UPDATE takes: claiming FOR UPDATE and then updating would make
# PostgreSQL record both lock modes in a MultiXact for every row, which halves the
# chunk's speed. The UPDATE addresses the claimed (locked, hence unmoved) row versions
# by ctid: a TID scan, where a join on id could turn into a scan of the whole table.
EXPIRE_REFRESH_SESSIONS_CHUNK = """
with portion as (
    select ctid as row_ctid from identity.refresh_sessions
    where status = 'Active' and expires_at <= $1 and expires_at >= $3
    order by expires_at
    limit $2
    for no key update skip locked
),
flipped as (
    update identity.refresh_sessions set status = 'Expired'
    where ctid = any(array(select row_ctid from portion))
      and status = 'Active' and expires_at <= $1
    returning expires_at
)
select count(*) as flipped, max(expires_at) as reached, array_agg(expires_at) as expired
from flipped
"""

COUNT_EXPIRED_SICR = """
select count(*) from identity.sign_in_confirmation_requests
where status = 'Pending' and expires_at <= $1
"""

# The first entry of ix_sicr_expires_at, like the refresh sessions' above.
OLDEST_EXPIRED_SICR = """
select min(expires_at) from identity.sign_in_confirmation_requests
where status = 'Pending' and expires_at <= $1
"""

EXPIRE_SICR = """
with flipped as (
    update identity.sign_in_confirmation_requests set status = 'Expired'
    where status = 'Pending' and expires_at <= $1
    returning expires_at
)
select array_agg(expires_at) as expired from flipped
"""

# Claimed through ix_sicr_expires_at, like the refresh chunk above.
EXPIRE_SICR_CHUNK = """
with portion as (
    select ctid as row_ctid from identity.sign_in_confirmation_requests
    where status = 'Pending' and expires_at <= $1 and expires_at >= $3
    order by expires_at
    limit $2
    for no key update skip locked
),
flipped as (
    update identity.sign_in_confirmation_requests set status = 'Expired'
    where ctid = any(array(select row_ctid from portion))
      and status = 'Pending' and expires_at <= $1
    returning expires_at
)
select count(*) as flipped, max(expires_at) as reached, array_agg(expires_at) as expired
from flipped
"""


# --- SessionRetentionJob -------------------------------------------------------------------

# Each batch claims rows through a partial index from the cursor $3 where the previous
# batch ended (a KeysetCursor), and deletes the claimed (locked, hence unmoved) row
# versions by ctid: see the chunk statements of expire_sessions for why.
# Through ix_sicr_retention_created_at.
DELETE_RETIRED_SICR_BATCH = """
with doomed as (
    select ctid as row_ctid from identity.sign_in_confirmation_requests
    where status in ('Confirmed', 'Expired') and created_at < $1 and created_at >= $3
    order by created_at
    limit $2
    for update skip locked
),
deleted as (
    delete from identity.sign_in_confirmation_requests
    where ctid = any(array(select row_ctid from doomed))
      and status in ('Confirmed', 'Expired')
    returning created_at
)
select count(*) as deleted, max(created_at) as reached from deleted
"""

# Through ix_refresh_sessions_retention_created_at.
DELETE_RETIRED_REFRESH_SESSIONS_BATCH = """
with doomed as (
    select ctid as row_ctid from identity.refresh_sessions
    where status in ('Rotated', 'Revoked', 'Expired') and created_at < $1 and created_at >= $3
    order by created_at
    limit $2
    for update skip locked
),
deleted as (
    delete from identity.refresh_sessions
    where ctid = any(array(select row_ctid from doomed))
      and status in ('Rotated', 'Revoked', 'Expired')
    returning created_at
)
select count(*) as deleted, max(created_at) as reached from deleted
"""


# --- A user's data: export and erasure (SPEC §10) -----------------------------------------

SELECT_ERASURE = """
select user_id, requested_at, requested_by, message_id
from identity.erasures
where user_id = $1
"""

# Every still-live session ends as a revoke does (session-revoked is published), then
# every session of the user goes.
REVOKE_ALL_USER_SESSIONS = """
update identity.refresh_sessions
set status = 'Revoked', revoked_at = $2, revoked_reason = $3, version = version + 1
where user_id = $1 and status = 'Active' and expires_at > $2
returning id, user_id
"""

DELETE_USER_SESSIONS = """
delete from identity.refresh_sessions where user_id = $1
"""

DELETE_PHONE_SIGN_IN_REQUESTS = """
delete from identity.sign_in_confirmation_requests where phone_number = $1
"""

DELETE_USER_PERMISSIONS = """
delete from identity.user_permissions where user_id = $1
"""

# Last, once nothing of the user is left: a session opened meanwhile fails the foreign key.
DELETE_USER = """
delete from identity.users where id = $1 returning id
"""

INSERT_ERASURE = """
insert into identity.erasures (user_id, requested_at, requested_by, message_id)
values ($1, $2, $3, $4)
"""

SELECT_USER = """
select id, phone_number, created_at from identity.users where id = $1
"""

SELECT_USER_PERMISSION_GRANTS = """
select permission, granted_at from identity.user_permissions
where user_id = $1
order by permission
"""

# Export pages, by (created_at, id) after $2, $3, $4 rows at most. The key's first column
# is bounded on its own too: that is what the index can seek to.
EXPORT_SIGN_IN_REQUESTS_PAGE = """
select id, status, created_at, expires_at, confirmed_at, attempts, ip_address
from identity.sign_in_confirmation_requests
where phone_number = $1 and created_at >= $2 and (created_at, id) > ($2, $3)
order by created_at, id
limit $4
"""

EXPORT_REFRESH_SESSIONS_PAGE = """
select id, family_id, status, created_at, last_used_at, expires_at, rotated_at, revoked_at,
       revoked_reason, signed_in_at, device_user_agent, device_ip
from identity.refresh_sessions
where user_id = $1 and created_at >= $2 and (created_at, id) > ($2, $3)
order by created_at, id
limit $4
"""


# --- Bearer liveness (platform.auth.SessionLiveness) ---------------------------------------

# Lazy TTL check (seed 000): an Active row past expires_at is not live, whether or not
# ExpireSessionsJob has flipped it yet.
SELECT_SESSION_IS_LIVE = """
select exists (
    select 1
    from identity.refresh_sessions
    where id = $1 and user_id = $2 and status = 'Active' and expires_at > $3
)
"""


# --- Session settings of the jobs ----------------------------------------------------------

SET_LOCK_TIMEOUT = "select set_config('lock_timeout', $1, false)"
RESET_LOCK_TIMEOUT = "reset lock_timeout"


# --- Signing keys (SPEC §8) -----------------------------------------------------------------

# One transaction at a time decides about the keys: the job, `keys rotate` and a first
# signer on an empty table (the unique indexes back this up).
SIGNING_KEYS_LOCK_CLASS = 0x4B455953  # "KEYS"

LOCK_SIGNING_KEYS = """
select pg_advisory_xact_lock($1::int, 0)
"""

SELECT_SIGNING_KEYS = """
select kid, status, created_at, activated_at, retired_at
from identity.signing_keys
order by created_at, kid
"""

# The JWKS: every key a live token may name, oldest first.
SELECT_PUBLIC_JWKS = """
select public_jwk
from identity.signing_keys
order by created_at, kid
"""

SELECT_CURRENT_SIGNING_KEY = """
select kid, private_key
from identity.signing_keys
where status = 'Current'
"""

# $4 'Current' (activated at once) or 'Next'; a second key of either status does nothing.
INSERT_SIGNING_KEY = """
insert into identity.signing_keys (kid, public_jwk, private_key, status, created_at, activated_at)
values ($1, $2::jsonb, $3, $4::varchar, $5::timestamptz,
        case when $4::varchar = 'Current' then $5::timestamptz end)
on conflict do nothing
"""

RETIRE_CURRENT_SIGNING_KEY = """
update identity.signing_keys
set status = 'Retired', retired_at = $1, version = version + 1
where status = 'Current'
returning kid
"""

PROMOTE_SIGNING_KEY = """
update identity.signing_keys
set status = 'Current', activated_at = $2, version = version + 1
where kid = $1 and status = 'Next'
"""

DELETE_SIGNING_KEYS = """
delete from identity.signing_keys where kid = any($1::text[])
"""

# `keys rotate --now`: the leaked key, and a waiting one, go at once.
DELETE_UNRETIRED_SIGNING_KEYS = """
delete from identity.signing_keys where status in ('Current', 'Next')
returning kid
"""


# --- Service clients (SPEC §8) --------------------------------------------------------------

INSERT_CLIENT = """
insert into identity.clients
    (client_id, name, secret_hash, scopes, status, created_at, updated_at)
values ($1, $2, $3, $4, 'Active', $5, $5)
"""

SELECT_CLIENTS = """
select client_id, name, scopes, status, created_at, updated_at
from identity.clients
order by created_at, client_id
"""

# The client ($1; null or unknown: no client columns) and the recent failures of its id ($2)
# and of the caller's address ($3). One statement, so a successful authentication costs no
# round trip more than reading the client did.
SELECT_CLIENT_CREDENTIALS = """
select c.client_id, c.name, c.scopes, c.status, c.created_at, c.updated_at, c.secret_hash,
    (select f.failed_at from identity.client_authentication_failures as f
     where f.key = $2) as client_failures,
    (select f.failed_at from identity.client_authentication_failures as f
     where f.key = $3) as address_failures
from (select) as one
left join identity.clients as c on c.client_id = $1
"""

# An operator's lookup by id (``token m2m``): no credentials are judged, so no failure counts.
SELECT_CLIENT = """
select client_id, name, scopes, status, created_at, updated_at
from identity.clients
where client_id = $1
"""

SELECT_CLIENTS_NAMED = """
select client_id, name, scopes, status, created_at, updated_at
from identity.clients
where name = $1
order by created_at, client_id
"""

ROTATE_CLIENT_CREDENTIALS = """
update identity.clients
set secret_hash = $2, secret_rotated_at = $3, updated_at = $3, version = version + 1
where client_id = $1 and status = 'Active'
returning client_id
"""

DISABLE_CLIENT = """
update identity.clients
set status = 'Disabled', disabled_at = $2, updated_at = $2, version = version + 1
where client_id = $1 and status = 'Active'
returning client_id
"""

SELECT_CLIENT_STATUS = """
select status from identity.clients where client_id = $1
"""

SELECT_DISABLED_CLIENT_IDS = """
select client_id from identity.clients where status = 'Disabled'
"""


# --- Client authentication failures (SPEC §11) -----------------------------------------------

# One failure, for each of its keys ($1: the client id's, then the address's — always in that
# order, so two failures never wait on each other in a cycle), at $2. On the locked row it
# judges whether the limit ($4 failures after $3) was already reached, keeps the newest $4
# failures of the minute, and returns the verdict with them.
RECORD_CLIENT_AUTHENTICATION_FAILURE = """
insert into identity.client_authentication_failures as f
    (key, failed_at, last_failed_at, last_refused)
select key, array[$2::timestamptz], $2, false
from unnest($1::text[]) with ordinality as keys (key, position)
order by position
on conflict (key) do update set
    last_refused = (select count(*) >= $4 from unnest(f.failed_at) as t where t > $3),
    failed_at = array(
        select t from (
            select t from unnest(f.failed_at || $2::timestamptz) as t
            where t > $3
            order by t desc
            limit $4
        ) as newest
        order by t
    ),
    last_failed_at = $2
returning key, failed_at, last_refused
"""

# Rows whose last failure left the window ($1), oldest first; rows a failure holds are
# skipped, never waited for. Its own statement: held beside an upsert, these row locks could
# close a cycle with another failure's.
DELETE_EXPIRED_CLIENT_AUTHENTICATION_FAILURES = """
delete from identity.client_authentication_failures
where key in (
    select key from identity.client_authentication_failures
    where last_failed_at <= $1
    order by last_failed_at
    limit $2
    for update skip locked
)
"""

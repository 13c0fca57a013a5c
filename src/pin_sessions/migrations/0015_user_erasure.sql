-- A user's erasure (SPEC §10). Identity keeps the proof; each other context keeps a
-- tombstone of its own so that an event or a request that was already under way when the
-- user was erased cannot bring the user id back. A tombstone holds a SHA-256 digest of the
-- user id, not the id: a scan of the contexts' tables for an erased id finds it only in
-- identity.erasures.

create table identity.erasures (
    user_id uuid primary key,
    requested_at timestamptz not null,
    requested_by varchar(16) not null,
    -- The user-erased event's MessageId: `users erase` waits for each context's consumer
    -- to record it as processed.
    message_id uuid not null,
    constraint chk_erasures_requested_by check (requested_by in ('user', 'operator'))
);

create table user_activity.erased_users (
    user_digest bytea primary key,
    erased_at timestamptz not null
);

create table dev_stats.erased_users (
    user_digest bytea primary key,
    erased_at timestamptz not null
);

-- dev-stats clears an erased user's id from their facts in bounded batches.
create index ix_session_facts_user_id
    on dev_stats.session_facts (user_id)
    where user_id is not null;

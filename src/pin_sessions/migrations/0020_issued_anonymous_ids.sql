-- This context issues a device's AnonymousId, at its first POST /sessions/start (one sent
-- without X-Anonymous-Id). A client that retries that start, not knowing whether the first
-- one arrived, sends the same Idempotency-Key: the first start records the id it issued under
-- the key, and every repeat within 24 hours, also one racing the first (it waits on the
-- uncommitted row), gets the same id and so the same session. A key older than 24 hours is
-- taken over by its next use; activity-retention deletes expired keys.
create table user_activity.issued_anonymous_ids (
    key varchar(64) not null,
    anonymous_id uuid not null,
    created_at timestamptz not null,
    constraint pk_issued_anonymous_ids primary key (key)
);

create index ix_issued_anonymous_ids_created_at on user_activity.issued_anonymous_ids (created_at);

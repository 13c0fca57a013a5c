-- user-activity: Idempotency-Key on POST /actions and /property-views (SPEC §8). One row per
-- device and key, reserved by the request that first inserts it, in the transaction that
-- records the action or view, so a repeat — also one arriving at the same time, which waits
-- on the uncommitted row — finds the first answer instead of recording again. A key older
-- than 24 hours is taken over by its next use; activity-retention deletes expired keys.
create table user_activity.idempotency_keys (
    anonymous_id uuid not null,
    key varchar(64) not null,
    -- SHA-256 of the operation and its body: the same key sent with another request is refused.
    request_hash bytea not null,
    created_at timestamptz not null,
    -- The first answer's body, written before the reserving transaction commits.
    response jsonb null,
    constraint pk_idempotency_keys primary key (anonymous_id, key)
);

create index ix_idempotency_keys_created_at on user_activity.idempotency_keys (created_at);

-- SPEC §11: failed client authentications at /oauth/token and /oauth/introspect, counted per
-- client id and per client address over the last minute. Counted here rather than in each
-- process, so the limit holds across every API process and instance. Only failures write;
-- a successful authentication reads the two rows in the statement that reads the client.

-- One row per client id ('client:<uuid>') and per address ('address:<IPv4 address or IPv6
-- /64>'), updated in place by one upsert per failure: the row lock orders the failures of
-- one key, so each sees the ones before it and the limit holds exactly.
create table identity.client_authentication_failures (
    key varchar(80) primary key,
    -- The newest failures, oldest first: at most PIN_OAUTH__FAILURE_LIMIT of them, none
    -- older than a minute when the row was written.
    failed_at timestamptz[] not null,
    last_failed_at timestamptz not null,
    -- Whether the latest failure found the limit already reached (it was answered 429),
    -- judged on the locked row, so the statement that wrote it can return the verdict.
    last_refused boolean not null
);

-- Rows whose last failure left the minute are deleted now and then, oldest first.
create index ix_client_auth_failures_last_failed_at
    on identity.client_authentication_failures (last_failed_at);

-- SPEC §11: failed client authentications at /oauth/token and /oauth/introspect, counted per
-- client id and per client address over the last minute. Counted here rather than in each
-- process, so the limit holds across every API process and instance. Only failures write;
-- a successful authentication reads the two counts in the statement that reads the client.

create table identity.client_authentication_failures (
    id bigint generated always as identity primary key,
    -- The client id presented, when it was a UUID (registered or not).
    client_id uuid null,
    -- The IPv4 address, or an IPv6 client's /64 (as the sign-in limits count); null when
    -- the address is unknown.
    ip_network varchar(45) null,
    failed_at timestamptz not null
);

-- Every authentication reads both counts through these. Whole (not partial) indexes, and no
-- index on failed_at alone: each one more is a plan the planner weighs on every success.
create index ix_client_auth_failures_client_id
    on identity.client_authentication_failures (client_id, failed_at);

create index ix_client_auth_failures_ip_network
    on identity.client_authentication_failures (ip_network, failed_at);

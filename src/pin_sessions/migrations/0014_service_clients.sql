-- SPEC §8: services registered for the client-credentials grant (RFC 6749 §4.4). Only
-- the SHA-256 of a client's secret is kept (the secret is 256 random bits, printed once).

create table identity.clients (
    client_id uuid primary key,
    name varchar(100) not null,
    secret_hash bytea not null,
    scopes text[] not null,
    status varchar(16) not null,
    created_at timestamptz not null,
    updated_at timestamptz not null,
    secret_rotated_at timestamptz null,
    disabled_at timestamptz null,
    version int not null default 1,
    constraint chk_clients_status check (status in ('Active', 'Disabled'))
);

-- Every API process reads the disabled clients every 30 s (internal routes refuse them).
create index ix_clients_disabled on identity.clients (client_id) where status = 'Disabled';

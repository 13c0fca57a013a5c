-- One schema per bounded context, plus the shared messaging schema that carries
-- integration events out of the transaction that produced them (transactional outbox).
create schema if not exists identity;
create schema if not exists user_activity;
create schema if not exists dev_stats;
create schema if not exists messaging;

-- Every integration event is written here in the same transaction as the state change.
-- position orders the log; txid lets readers hold back rows of transactions that are still
-- open, so a row whose transaction commits after a later-numbered one is never skipped.
create table messaging.outbox (
    position bigint generated always as identity primary key,
    message_id uuid not null,
    topic varchar(255) not null,
    event_type varchar(255) not null,
    version int not null,
    aggregate_type varchar(64) not null,
    aggregate_id varchar(64) not null,
    payload jsonb not null,
    headers jsonb not null default '{}'::jsonb,
    created_at timestamptz not null,
    txid xid8 not null default pg_current_xact_id(),
    published_at timestamptz null,
    constraint ux_outbox_message_id unique (message_id)
);

create index ix_outbox_unpublished on messaging.outbox (position) where published_at is null;
create index ix_outbox_aggregate on messaging.outbox (aggregate_id, position);

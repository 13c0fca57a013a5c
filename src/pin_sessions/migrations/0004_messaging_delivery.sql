-- Delivery of the outbox (SPEC §6): the relay to Kafka, the built-in PostgreSQL bus and the
-- consumer runner's bookkeeping.

-- One durable read position per consumer of the PostgreSQL bus. The log is read in
-- (txid, position) order below the snapshot's xmin, so the position is that pair: every row
-- at or before it has been handled, and no row can later appear before it.
create table messaging.bus_positions (
    consumer varchar(128) primary key,
    last_txid xid8 not null,
    last_position bigint not null,
    updated_at timestamptz not null
);

-- First-seen by MessageId per consumer: written in the same transaction as the handler's
-- effect, so a redelivered message finds its row and is skipped.
create table messaging.processed_messages (
    consumer varchar(128) not null,
    message_id uuid not null,
    processed_at timestamptz not null,
    constraint pk_processed_messages primary key (consumer, message_id)
);

create index ix_processed_messages_processed_at on messaging.processed_messages (processed_at);

-- Messages a consumer gave up on after its tries, with the last error, so the rest flow on.
create table messaging.dead_letters (
    id bigint generated always as identity primary key,
    consumer varchar(128) not null,
    message_id uuid not null,
    topic varchar(255) not null,
    event_type varchar(255) not null,
    version int not null,
    aggregate_id varchar(64) not null,
    payload jsonb not null,
    headers jsonb not null,
    error text not null,
    attempts int not null,
    dead_lettered_at timestamptz not null,
    constraint ux_dead_letters_consumer_message unique (consumer, message_id)
);

-- Finding sent rows to delete in bounded batches without scanning the unsent ones.
create index ix_outbox_published on messaging.outbox (position) where published_at is not null;
-- The PostgreSQL bus reads the log in (txid, position) order.
create index ix_outbox_txid_position on messaging.outbox (txid, position);

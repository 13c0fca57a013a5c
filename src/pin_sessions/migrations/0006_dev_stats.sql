-- dev-stats read model: one row per ended session, first seen wins (seed 004 consumer table).
create table dev_stats.session_facts (
    session_id uuid primary key,
    message_id uuid not null,
    anonymous_id uuid not null,
    user_id uuid null,
    created_at timestamptz not null,
    last_activity_at timestamptz not null,
    duration_seconds int not null,
    recorded_at timestamptz not null,
    constraint chk_session_facts_duration_nonneg check (duration_seconds >= 0)
);

-- The summary filters and groups by the day the session started.
create index ix_session_facts_created_at on dev_stats.session_facts (created_at);

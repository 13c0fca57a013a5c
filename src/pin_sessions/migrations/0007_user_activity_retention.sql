-- ActivityRetentionJob: find Inactive sessions past the retention age through an index
-- that holds only them, so each bounded batch reads its rows instead of scanning the
-- table (which keeps a year of closed sessions).
create index ix_sessions_retention_ended_at
    on user_activity.sessions (ended_at)
    where status = 'Inactive';

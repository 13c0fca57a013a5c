-- Retention measures a row's age from its creation (seed 000: "SICR older than 30 days,
-- refresh_sessions older than 90 days"; SPEC §2: "delete Inactive sessions older than
-- this"), as SICR retention already did. The indexes of 0005 and 0007 ordered terminal
-- rows by their last transition and by their end; these order them by created_at, so
-- each bounded batch still reads only the rows it deletes.

drop index identity.ix_refresh_sessions_retention_last_transition;

create index ix_refresh_sessions_retention_created_at
    on identity.refresh_sessions (created_at)
    where status in ('Rotated', 'Revoked', 'Expired');

drop index user_activity.ix_sessions_retention_ended_at;

create index ix_sessions_retention_created_at
    on user_activity.sessions (created_at)
    where status = 'Inactive';

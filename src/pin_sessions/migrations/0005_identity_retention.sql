-- SessionRetentionJob: find what it may delete through indexes that hold only terminal
-- rows, so each bounded DELETE reads its batch instead of scanning the table.

-- Terminal SICR (Confirmed, Expired) by age of creation.
create index ix_sicr_retention_created_at
    on identity.sign_in_confirmation_requests (created_at)
    where status in ('Confirmed', 'Expired');

-- Terminal refresh sessions by their last transition. `expires_at` is part of it: a
-- Rotated or Revoked row is kept until 90 days past its expiry too, so reuse of a rotated
-- token is recognised for as long as the token could otherwise have been presented.
create index ix_refresh_sessions_retention_last_transition
    on identity.refresh_sessions ((greatest(rotated_at, revoked_at, expires_at)))
    where status in ('Rotated', 'Revoked', 'Expired');

-- A session's LinkedAt is the moment it was linked (the linking transaction's now), and the
-- instant of the sign-in that linked it is kept beside it in signed_in_at: the key sign-ins
-- are ordered by, so that the latest sign-in owns the device whatever order its link and the
-- others arrive in. Until now linked_at held that instant; it moves to its own column.
--
-- Existing linked rows get signed_in_at from linked_at, which is what it meant for them; their
-- linked_at is left as it was (the sign-in's instant, not the moment of linking): that moment
-- was never recorded and cannot be recovered.
--
-- The update rewrites every linked row once, under the table lock this transaction takes:
-- sized for the 1–10k Active sessions and a year of history this table is designed for.
set local lock_timeout = '5s';

alter table user_activity.sessions
    add column signed_in_at timestamptz null;

update user_activity.sessions
set signed_in_at = linked_at
where user_id is not null;

-- Set and cleared with user_id, as linked_at is (chk_sessions_link_pair).
alter table user_activity.sessions
    add constraint chk_sessions_sign_in_pair check ((user_id is null) = (signed_in_at is null));

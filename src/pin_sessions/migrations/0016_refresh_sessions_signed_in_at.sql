-- SPEC §11 "The latest sign-in owns the device": a user's access tokens carry `auth_time`,
-- the instant of the sign-in that started their refresh family, and every refresh keeps it.
-- Each refresh session carries that instant, copied from its parent on rotation.
--
-- Safe on a populated table: a nullable column without a default changes the catalog
-- alone (no row is rewritten), and the brief exclusive lock it takes is given up rather
-- than left queueing every sign-in and refresh behind a long transaction.
--
-- Sessions of families begun before this migration keep null; identity reads them as the
-- family's first session's created_at (that sign-in's instant), or, once retention has
-- removed that row, as the session's own created_at (no sign-in of the family came later).
set local lock_timeout = '5s';

alter table identity.refresh_sessions
    add column signed_in_at timestamptz null;

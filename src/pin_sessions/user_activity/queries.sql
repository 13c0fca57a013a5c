-- user-activity's statements in named blocks, run through user_activity/repository.py
-- (platform/queries.py loads them); the others are sql.py's constants.

-- === A user's erasure (SPEC §10) ===

-- name: select_erased
-- The tombstone (platform/erasure.py): its key is the id's digest, never the id.
select exists (select 1 from user_activity.erased_users where user_digest = :user_digest);

-- name: insert_erased
-- The tombstone, once: an erasure run again finds it in place.
insert into user_activity.erased_users (user_digest, erased_at)
values (:user_digest, :erased_at)
on conflict (user_digest) do nothing;

-- name: end_erased_user_sessions
-- The erased user's Active sessions end without session-ended (SPEC §10): they are about to
-- go, and dev-stats is dropping the user's id anyway. Once Inactive, no heartbeat, closer or
-- request touches them again (INV-SES-006); a device that comes back starts a new session.
update user_activity.sessions
set status = 'Inactive', ended_at = :ended_at, duration = last_activity_at - created_at
where user_id = :user_id and status = 'Active';

-- name: delete_erased_user_actions
-- One bounded batch of the user's actions: children go first, since they reference their
-- session ON DELETE RESTRICT.
delete from user_activity.action_events where id in (
    select a.id
    from user_activity.sessions as s
    join user_activity.action_events as a on a.session_id = s.id
    where s.user_id = :user_id
    limit :batch_size
);

-- name: delete_erased_user_views
-- One bounded batch of the user's property views, the other children.
delete from user_activity.property_object_views where id in (
    select v.id
    from user_activity.sessions as s
    join user_activity.property_object_views as v on v.session_id = s.id
    where s.user_id = :user_id
    limit :batch_size
);

-- name: delete_erased_user_sessions
-- One bounded batch of the user's sessions, once their children are gone.
delete from user_activity.sessions where id in (
    select id from user_activity.sessions where user_id = :user_id limit :batch_size
);

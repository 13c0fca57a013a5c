-- dev-stats' statements, run through dev_stats/repository.py (platform/queries.py loads them).

-- === Recording an ended session (consumer dev-stats-session-ended) ===

-- name: record_fact
-- The fact, and its day's rollup row only when the fact is new. First seen wins: the one
-- session-ended event per session (INV-SES-006) may arrive twice, and ON CONFLICT DO NOTHING
-- then returns no row, so nothing is added to the rollup. Two consumers recording one session
-- at once: the second insert waits on the first's key and then skips; two facts of one day
-- queue on that day's row. The row counts the session as a guest's or a user's as the fact
-- says now; an erasure that later clears the fact's user_id leaves it. :duration_bucket is
-- the duration's bucket (dev_stats.durations); dev_stats.histogram_add is migration 0010's.
with fact as (
    insert into dev_stats.session_facts
        (session_id, message_id, anonymous_id, user_id, created_at, last_activity_at,
         duration_seconds, recorded_at)
    values (:session_id, :message_id, :anonymous_id, :user_id, :created_at, :last_activity_at,
            :duration_seconds, :recorded_at)
    on conflict (session_id) do nothing
    returning created_at, user_id, duration_seconds
)
insert into dev_stats.daily_sessions as d
    (day, guest_sessions, user_sessions, duration_seconds_sum, duration_histogram)
select (created_at at time zone 'UTC')::date,
       (user_id is null)::int,
       (user_id is not null)::int,
       duration_seconds,
       dev_stats.histogram_add('', :duration_bucket)
from fact
on conflict (day) do update
set guest_sessions = d.guest_sessions + excluded.guest_sessions,
    user_sessions = d.user_sessions + excluded.user_sessions,
    duration_seconds_sum = d.duration_seconds_sum + excluded.duration_seconds_sum,
    duration_histogram = dev_stats.histogram_add(d.duration_histogram, :duration_bucket);

-- name: clear_fact_user
-- A late fact of an erased user: counted as a user's session by record_fact, then its id goes.
update dev_stats.session_facts set user_id = null where session_id = :session_id;

-- === The summary (GET /api/dev-stats/sessions/summary) ===

-- name: select_days
-- Every day of the period, first and last included (dates, UTC): at most 366 rows,
-- whatever the number of facts. A day without a row had no sessions. The histogram is
-- 4-byte big-endian counts per bucket (migration 0010).
select period.day::date as day,
       coalesce(r.guest_sessions, 0) as guest_sessions,
       coalesce(r.user_sessions, 0) as user_sessions,
       coalesce(r.duration_seconds_sum, 0) as duration_seconds_sum,
       coalesce(r.duration_histogram, '') as duration_histogram
from generate_series(:first_day::date, :last_day::date, interval '1 day') as period (day)
left join dev_stats.daily_sessions as r on r.day = period.day::date
order by period.day;

-- === A user's erasure (SPEC §10) ===

-- name: select_erased
-- The tombstone (platform/erasure.py): its key is the id's digest, never the id.
select exists (select 1 from dev_stats.erased_users where user_digest = :user_digest);

-- name: insert_erased
-- The tombstone, once: an erasure run again finds it in place.
insert into dev_stats.erased_users (user_digest, erased_at)
values (:user_digest, :erased_at)
on conflict (user_digest) do nothing;

-- name: clear_erased_user_facts
-- A fact keeps its session, times and duration, and the rollups keep counting it as a
-- user's session: only the id goes. Bounded batches through ix_session_facts_user_id.
update dev_stats.session_facts set user_id = null
where session_id in (
    select session_id from dev_stats.session_facts where user_id = :user_id limit :batch_size
);

"""dev-stats SQL, named."""

from __future__ import annotations

# First seen wins: the one session-ended event per session (INV-SES-006) may arrive twice.
INSERT_FACT = """
insert into dev_stats.session_facts
    (session_id, message_id, anonymous_id, user_id, created_at, last_activity_at,
     duration_seconds, recorded_at)
values ($1, $2, $3, $4, $5, $6, $7, $8)
on conflict (session_id) do nothing
"""

# $1, $2: the first and last day (dates, UTC) of the period, both included.
SELECT_TOTALS = """
select count(*) as sessions,
       count(*) filter (where user_id is null) as guest_sessions,
       count(*) filter (where user_id is not null) as user_sessions,
       avg(duration_seconds)::float8 as avg_duration,
       percentile_cont(0.5) within group (order by duration_seconds) as p50_duration,
       percentile_cont(0.9) within group (order by duration_seconds) as p90_duration
from dev_stats.session_facts
where created_at >= $1::date::timestamp at time zone 'UTC'
  and created_at < ($2::date + 1)::timestamp at time zone 'UTC'
"""

SELECT_BY_DAY = """
select day::date as day,
       count(f.session_id) as sessions,
       count(f.session_id) filter (where f.user_id is null) as guest_sessions,
       count(f.session_id) filter (where f.user_id is not null) as user_sessions,
       avg(f.duration_seconds)::float8 as avg_duration
from generate_series($1::date, $2::date, interval '1 day') as day
left join dev_stats.session_facts f
  on f.created_at >= day::date::timestamp at time zone 'UTC'
 and f.created_at < (day::date + 1)::timestamp at time zone 'UTC'
group by day
order by day
"""

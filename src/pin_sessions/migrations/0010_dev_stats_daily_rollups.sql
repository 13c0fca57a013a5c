-- dev-stats rollups: one row per UTC day, so the summary reads at most 366 rows instead of
-- every fact of its period (a year of 10M facts took seconds). The dev-stats consumer adds to
-- a day's row in the transaction that first records a fact of a session that began that day,
-- so a redelivered event changes nothing here either.
--
-- A session counts as a guest's or a user's as its fact said when it was counted: clearing a
-- user_id from the facts later (erasure) must not move sessions from one kind to the other.
create table dev_stats.daily_sessions (
    day date primary key,
    guest_sessions int not null,
    user_sessions int not null,
    duration_seconds_sum bigint not null,
    -- Sessions per duration bucket (pin_sessions.dev_stats.durations) as 4-byte big-endian
    -- counts, bucket b at bytes 4b … 4b + 3, up to the day's longest session's bucket. Not an
    -- int[]: PostgreSQL and the driver convert an array element by element, which made that
    -- conversion most of a year's summary; bytea travels as it is stored.
    duration_histogram bytea not null
);

-- One more session in ``bucket`` of a histogram as stored above; a bucket past the end grows
-- the histogram with zero counts up to it. A single expression and not STRICT (a CASE is not),
-- so that PostgreSQL inlines it into the consumer's statement instead of calling a function.
create function dev_stats.histogram_add(histogram bytea, bucket int) returns bytea
language sql immutable as $$
    select case
        when length(histogram) > 4 * bucket then
            overlay(histogram placing int4send(
                        (get_byte(histogram, 4 * bucket) << 24)
                        + (get_byte(histogram, 4 * bucket + 1) << 16)
                        + (get_byte(histogram, 4 * bucket + 2) << 8)
                        + get_byte(histogram, 4 * bucket + 3) + 1)
                    from 4 * bucket + 1 for 4)
        else histogram || decode(repeat('00', 4 * bucket - length(histogram)), 'hex') || int4send(1)
    end
$$;

-- The rows below are built from the facts; no fact may be added meanwhile. A dev-stats
-- consumer of an older version, which adds facts without rollups, must be stopped before
-- this migration runs.
lock table dev_stats.session_facts in share mode;

-- The bucket as durations.bucket_of computes it: shift = max(bit length - 6, 0), bucket =
-- shift * 32 + (seconds >> shift); the bit length of an int4 is the length of its bits
-- without the leading zeros.
insert into dev_stats.daily_sessions
    (day, guest_sessions, user_sessions, duration_seconds_sum, duration_histogram)
with per_bucket as (
    select (f.created_at at time zone 'UTC')::date as day,
           s.shift * 32 + (f.duration_seconds >> s.shift) as bucket,
           count(*) filter (where f.user_id is null) as guest_sessions,
           count(*) filter (where f.user_id is not null) as user_sessions,
           sum(f.duration_seconds) as duration_seconds_sum
    from dev_stats.session_facts as f
    cross join lateral (
        select greatest(length(ltrim(f.duration_seconds::bit(32)::text, '0')) - 6, 0) as shift
    ) as s
    group by 1, 2
), cells as (
    select day, generate_series(0, max(bucket)) as bucket
    from per_bucket
    group by day
)
select c.day,
       sum(p.guest_sessions)::int,
       sum(p.user_sessions)::int,
       sum(p.duration_seconds_sum)::bigint,
       string_agg(int4send(coalesce(p.guest_sessions + p.user_sessions, 0)::int), ''::bytea
                  order by c.bucket)
from cells as c
left join per_bucket as p on p.day = c.day and p.bucket = c.bucket
group by c.day;

"""The books of a soak, reconciled once the outbox has drained (SPEC §6, §10, seeds 003 and 004).

The service deletes what it has delivered (outbox rows) and what an erasure takes
(sessions, views, actions), so the soak keeps its own ledger, in a schema of its own
(``soak``) that the service never reads: every outbox row as written, and every
user-activity row deleted. Erased users' ids are in that ledger, on purpose: it is the
instrument's record, not the service's, and the scan for traces leaves it out.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any

import asyncpg

LEDGER = """
create schema soak;
create table soak.events (
    message_id uuid not null, topic text not null, aggregate_id text not null,
    user_id text null, created_at timestamptz not null
);
create function soak.record_event() returns trigger language plpgsql as $$
begin
    insert into soak.events values (new.message_id, new.topic, new.aggregate_id,
                                    new.payload ->> 'UserId', new.created_at);
    return new;
end $$;
create trigger soak_events after insert on messaging.outbox
    for each row execute function soak.record_event();

create table soak.deleted (tbl text not null, id uuid not null, session_id uuid, user_id uuid);
create function soak.record_session_delete() returns trigger language plpgsql as $$
begin
    insert into soak.deleted values (tg_table_name, old.id, old.id, old.user_id);
    return old;
end $$;
create function soak.record_child_delete() returns trigger language plpgsql as $$
begin
    insert into soak.deleted values (tg_table_name, old.id, old.session_id, old.user_id);
    return old;
end $$;
create trigger soak_deleted after delete on user_activity.sessions
    for each row execute function soak.record_session_delete();
create trigger soak_deleted after delete on user_activity.action_events
    for each row execute function soak.record_child_delete();
create trigger soak_deleted after delete on user_activity.property_object_views
    for each row execute function soak.record_child_delete();
"""

SESSION_ENDED = "pin.user-activity.session-ended.v1"
# Which consumers apply which topic (the others have none).
CONSUMERS = {
    "pin.identity.sign-ins.v1": ("identity-signed-in",),
    SESSION_ENDED: ("dev-stats-session-ended",),
    "pin.identity.user-erased.v1": ("user-activity-user-erased", "dev-stats-user-erased"),
}

DOUBLE_ACTIVE = """
select count(*) from (
    select anonymous_id from user_activity.sessions where status = 'Active'
    group by anonymous_id having count(*) > 1
) as doubled
"""

UNAPPLIED = """
select count(*) from soak.events e
cross join lateral unnest(case e.topic
    when 'pin.identity.sign-ins.v1' then array['identity-signed-in']
    when 'pin.user-activity.session-ended.v1' then array['dev-stats-session-ended']
    when 'pin.identity.user-erased.v1'
        then array['user-activity-user-erased', 'dev-stats-user-erased']
    else array[]::text[] end) as c(consumer)
where not exists (select 1 from messaging.processed_messages p
                  where p.consumer = c.consumer and p.message_id = e.message_id)
  and not exists (select 1 from messaging.dead_letters d
                  where d.consumer = c.consumer and d.message_id = e.message_id)
"""

SETTLED = f"""
select (select count(*) from user_activity.sessions where status = 'Active') as active,
       (select count(*) from messaging.outbox) as outbox,
       ({UNAPPLIED}) as unapplied
"""


async def install_ledger(dsn: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(LEDGER)
    finally:
        await conn.close()


async def count_double_active(dsn: str) -> int:
    conn = await asyncpg.connect(dsn, timeout=5)
    try:
        return int(await conn.fetchval(DOUBLE_ACTIVE, timeout=5))
    finally:
        await conn.close()


async def settle(dsn: str, within: float) -> dict[str, Any]:
    """Until no session is Active, the outbox is empty and every event applied (or timeout)."""
    deadline = time.monotonic() + within
    started = time.monotonic()
    last: dict[str, Any] = {}
    while True:
        try:
            conn = await asyncpg.connect(dsn, timeout=5)
            try:
                row = await conn.fetchrow(SETTLED, timeout=10)
            finally:
                await conn.close()
            assert row is not None
            last = dict(row)
        except (OSError, asyncpg.PostgresError, TimeoutError) as exc:
            last = {"error": str(exc)}
        settled = last.get("active") == 0 and last.get("outbox") == 0 and last.get("unapplied") == 0
        if settled or time.monotonic() > deadline:
            return {**last, "settled": settled, "seconds": round(time.monotonic() - started, 1)}
        await asyncio.sleep(1.0)


def _invariant(holds: bool, **counts: Any) -> dict[str, Any]:
    return {"holds": holds, **counts}


async def reconcile(
    dsn: str,
    *,
    acknowledged: dict[str, set[str]],
    refresh_owner: dict[str, str],
    erased_ids: set[str],
    erased_phones: set[str],
    double_active_seen: int,
    settled: dict[str, Any],
) -> dict[str, Any]:
    """Every invariant with its counts."""
    conn = await asyncpg.connect(dsn)
    try:
        return {
            "acknowledgedWritesPresent": await _writes(
                conn, acknowledged, refresh_owner, erased_ids
            ),
            "oneActiveSessionPerDevice": _invariant(
                double_active_seen == 0 and settled.get("active") == 0,
                devicesWithTwoActiveSeen=double_active_seen,
                activeAfterSettling=settled.get("active"),
            ),
            "sessionEndedOncePerClosedSession": await _ended_once(conn, erased_ids),
            "devStatsOneFactPerSessionEnded": await _facts(conn),
            "erasedUsersLeaveNoTrace": await _traces(conn, erased_ids, erased_phones),
            "outboxDrained": await _drained(conn, settled),
        }
    finally:
        await conn.close()


WRITES = {
    "sessions": "select id::text from user_activity.sessions where id = any($1::uuid[])",
    "actions": "select id::text from user_activity.action_events where id = any($1::uuid[])",
    "views": "select id::text from user_activity.property_object_views where id = any($1::uuid[])",
    "endedViews": "select id::text from user_activity.property_object_views "
    "where id = any($1::uuid[]) and ended_at is not null",
    "refusedViewEnds": "select id::text from user_activity.property_object_views "
    "where id = any($1::uuid[])",
    "users": "select id::text from identity.users where id = any($1::uuid[])",
    "refreshSessions": "select id::text from identity.refresh_sessions where id = any($1::uuid[])",
    "erasures": "select user_id::text from identity.erasures where user_id = any($1::uuid[])",
}
TABLE_OF = {
    "sessions": "sessions",
    "actions": "action_events",
    "views": "property_object_views",
    "endedViews": "property_object_views",
    "refusedViewEnds": "property_object_views",
}
# Rows an erasure took: the user's own, and whatever hung on a session of theirs.
ERASED_ROWS = """
select d.tbl, d.id::text from soak.deleted d
where d.user_id = any($1::uuid[])
   or d.session_id in (select id from soak.deleted
                       where tbl = 'sessions' and user_id = any($1::uuid[]))
"""
DELETED_OTHERWISE = (
    f"select count(*) from soak.deleted where (tbl, id::text) not in ({ERASED_ROWS})"
)


async def _writes(
    conn: asyncpg.Connection,
    acknowledged: dict[str, set[str]],
    refresh_owner: dict[str, str],
    erased_ids: set[str],
) -> dict[str, Any]:
    erased = list(erased_ids)
    gone = {(row["tbl"], row["id"]) for row in await conn.fetch(ERASED_ROWS, erased)}
    kinds: dict[str, Any] = {}
    missing_total = 0
    for kind, ids in acknowledged.items():
        present = {row[0] for row in await conn.fetch(WRITES[kind], list(ids))}
        absent = ids - present
        if kind in TABLE_OF:
            with_erasure = {i for i in absent if (TABLE_OF[kind], i) in gone}
        elif kind == "refreshSessions":
            with_erasure = {i for i in absent if refresh_owner.get(i) in erased_ids}
        elif kind == "users":
            with_erasure = absent & erased_ids
        else:
            with_erasure = set()
        missing = absent - with_erasure
        if kind == "refusedViewEnds":
            # A view its own device was told is not found must be gone, with an erasure.
            missing = present | (absent - with_erasure)
        missing_total += len(missing)
        kinds[kind] = {
            "acknowledged": len(ids),
            "present": len(present),
            "goneWithErasure": len(with_erasure),
            "missing": len(missing),
            "missingSamples": sorted(missing)[:5],
        }
    deleted_otherwise = int(await conn.fetchval(DELETED_OTHERWISE, erased))
    return _invariant(
        missing_total == 0 and deleted_otherwise == 0,
        kinds=kinds,
        deletedOtherwiseThanByErasure=deleted_otherwise,
    )


ENDED_PER_SESSION = """
select s.device_type = 'Bot' as bot, count(e.message_id) as events
from user_activity.sessions s
left join soak.events e on e.topic = $1 and e.aggregate_id = s.id::text
where s.status = 'Inactive'
group by s.id, s.device_type
"""
# session-ended events of sessions no longer there: only an erasure may have taken them.
ORPHAN_ENDED = """
select count(*) from soak.events e
where e.topic = $1
  and not exists (select 1 from user_activity.sessions s where s.id::text = e.aggregate_id)
  and e.aggregate_id not in (select id::text from soak.deleted
                             where tbl = 'sessions' and user_id = any($2::uuid[]))
"""


async def _ended_once(conn: asyncpg.Connection, erased_ids: set[str]) -> dict[str, Any]:
    """Every closed session, a bot's included, published exactly one session-ended."""
    rows = await conn.fetch(ENDED_PER_SESSION, SESSION_ENDED)
    sessions = Counter(int(row["events"]) for row in rows)
    bots = [int(row["events"]) for row in rows if row["bot"]]
    orphans = int(await conn.fetchval(ORPHAN_ENDED, SESSION_ENDED, list(erased_ids)))
    none, more = sessions.get(0, 0), sum(n for events, n in sessions.items() if events > 1)
    return _invariant(
        none == 0 and more == 0 and orphans == 0,
        closedSessions=sum(sessions.values()),
        withExactlyOne=sessions.get(1, 0),
        withNone=none,
        withMore=more,
        botSessions=len(bots),
        botSessionsWithExactlyOne=bots.count(1),
        eventsOfVanishedSessions=orphans,
    )


FACTS = """
select
    (select count(distinct aggregate_id) from soak.events where topic = $1) as ended_sessions,
    (select count(*) from soak.events where topic = $1) as ended_events,
    (select count(*) from dev_stats.session_facts) as facts,
    (select count(*) from (select distinct aggregate_id from soak.events where topic = $1) e
      where not exists (select 1 from dev_stats.session_facts f
                        where f.session_id::text = e.aggregate_id)) as without_fact,
    (select count(*) from dev_stats.session_facts f
      where not exists (select 1 from soak.events e
                        where e.topic = $1 and e.message_id = f.message_id
                          and e.aggregate_id = f.session_id::text)) as fact_without_event
"""


async def _facts(conn: asyncpg.Connection) -> dict[str, Any]:
    row = await conn.fetchrow(FACTS, SESSION_ENDED)
    assert row is not None
    twice = int(row["ended_events"]) - int(row["ended_sessions"])
    return _invariant(
        row["without_fact"] == 0 and row["fact_without_event"] == 0 and twice == 0,
        sessionEndedEvents=row["ended_events"],
        sessionsEnded=row["ended_sessions"],
        facts=row["facts"],
        endedWithoutFact=row["without_fact"],
        factsWithoutTheirEvent=row["fact_without_event"],
        sessionsEndedTwice=twice,
    )


EVERY_TABLE = """
select table_schema, table_name from information_schema.tables
where table_type = 'BASE TABLE'
  and table_schema not in ('pg_catalog', 'information_schema', 'soak')
order by table_schema, table_name
"""
# What SPEC §10 keeps of an erased user: the proof of the erasure, by id, no phone.
KEPT = {"identity.erasures"}
APPLIED = """
select count(*) from identity.erasures e
join messaging.processed_messages p on p.message_id = e.message_id
where e.user_id = any($1::uuid[])
  and p.consumer in ('user-activity-user-erased', 'dev-stats-user-erased')
"""


async def _traces(
    conn: asyncpg.Connection, erased_ids: set[str], erased_phones: set[str]
) -> dict[str, Any]:
    found: dict[str, int] = {}
    if erased_ids:
        for table in await conn.fetch(EVERY_TABLE):
            name = f"{table['table_schema']}.{table['table_name']}"
            quoted = f'"{table["table_schema"]}"."{table["table_name"]}"'
            for kind, needles in (("userId", erased_ids), ("phone", erased_phones)):
                if kind == "userId" and name in KEPT:
                    continue
                count = await conn.fetchval(
                    f"select count(*) from {quoted} as t "  # names from the catalog
                    "where t::text like any(select '%' || n || '%' from unnest($1::text[]) n)",
                    sorted(needles),
                )
                if count:
                    found[f"{name} ({kind})"] = int(count)
    applied = int(await conn.fetchval(APPLIED, list(erased_ids))) if erased_ids else 0
    expected = 2 * len(erased_ids)
    return _invariant(
        not found and applied == expected,
        erasedUsers=len(erased_ids),
        appliedByConsumers=f"{applied}/{expected}",
        tracesFound=found,
    )


async def _drained(conn: asyncpg.Connection, settled: dict[str, Any]) -> dict[str, Any]:
    outbox = int(await conn.fetchval("select count(*) from messaging.outbox"))
    dead = int(await conn.fetchval("select count(*) from messaging.dead_letters"))
    unapplied = int(await conn.fetchval(UNAPPLIED))
    events = int(await conn.fetchval("select count(*) from soak.events"))
    return _invariant(
        outbox == 0 and dead == 0 and unapplied == 0,
        eventsWritten=events,
        outboxRows=outbox,
        deadLetters=dead,
        eventsNotApplied=unapplied,
        settledInSeconds=settled.get("seconds"),
    )

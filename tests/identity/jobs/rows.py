"""Seeding identity rows for the job tests: one set-based INSERT per call, so tens of
thousands of rows take a fraction of a second."""

from __future__ import annotations

import uuid
from datetime import datetime

from pin_sessions.platform.database import Connection

INSERT_USER = """
insert into identity.users (id, phone_number, created_at) values ($1, $2, $3)
"""

INSERT_REFRESH_SESSIONS = """
insert into identity.refresh_sessions
    (id, user_id, family_id, token_hash, status, created_at, expires_at, last_used_at,
     rotated_at, revoked_at, revoked_reason, device_user_agent)
select gen_random_uuid(), $1, gen_random_uuid(),
       sha256(convert_to(gen_random_uuid()::text, 'UTF8')),
       $2, $3, $4, $3, $5, $6, $7, 'test-agent'
from generate_series(1, $8)
returning id
"""

INSERT_SICR = """
insert into identity.sign_in_confirmation_requests
    (id, phone_number, code_hash, status, created_at, expires_at, confirmed_at)
select gen_random_uuid(), '+15550100000', '\\x00'::bytea, $1, $2, $3, $4
from generate_series(1, $5)
returning id
"""

# A test-only audit of every status change, with the transaction that made it: proves
# each row flipped exactly once and how many rows one transaction touched.
CREATE_TRANSITION_AUDIT = """
create table public.test_transitions (
    table_name text not null,
    row_id uuid not null,
    old_status text not null,
    new_status text not null,
    txid bigint not null default txid_current()
);
create function public.test_record_transition() returns trigger language plpgsql as $$
begin
    insert into public.test_transitions (table_name, row_id, old_status, new_status)
    values (tg_table_name, old.id, old.status, coalesce(new.status, 'Deleted'));
    return null;
end $$;
create trigger test_refresh_transitions after update of status or delete
    on identity.refresh_sessions for each row execute function public.test_record_transition();
create trigger test_sicr_transitions after update of status or delete
    on identity.sign_in_confirmation_requests
    for each row execute function public.test_record_transition();
"""


async def insert_user(conn: Connection, now: datetime) -> uuid.UUID:
    user_id = uuid.uuid4()
    phone = "+1555" + str(user_id.int % 10**8).zfill(8)
    await conn.execute(INSERT_USER, user_id, phone, now)
    return user_id


async def insert_refresh_sessions(
    conn: Connection,
    user_id: uuid.UUID,
    *,
    count: int,
    status: str,
    created_at: datetime,
    expires_at: datetime,
    rotated_at: datetime | None = None,
    revoked_at: datetime | None = None,
    revoked_reason: str | None = None,
) -> list[uuid.UUID]:
    rows = await conn.fetch(
        INSERT_REFRESH_SESSIONS,
        user_id,
        status,
        created_at,
        expires_at,
        rotated_at,
        revoked_at,
        revoked_reason,
        count,
    )
    return [row["id"] for row in rows]


async def insert_sicr(
    conn: Connection,
    *,
    count: int,
    status: str,
    created_at: datetime,
    expires_at: datetime,
    confirmed_at: datetime | None = None,
) -> list[uuid.UUID]:
    rows = await conn.fetch(INSERT_SICR, status, created_at, expires_at, confirmed_at, count)
    return [row["id"] for row in rows]


async def statuses(conn: Connection, table: str) -> dict[str, int]:
    """Row counts by status of one identity table (a name from this module's tests only)."""
    rows = await conn.fetch(f"select status, count(*) as n from identity.{table} group by status")
    return {row["status"]: row["n"] for row in rows}

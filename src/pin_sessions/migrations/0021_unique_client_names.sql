-- A service client's name is unique, so `token m2m --client NAME` and a reader of
-- `clients list` always know which client a name means.
--
-- Names registered twice before this constraint are not refused here: one of each group
-- keeps its name (an Active one before a disabled one, then the oldest), and each other
-- gets its own client id appended, `crm (4f1c…)`, which no other client can hold. Services
-- authenticate by client id, never by name, so a renamed client keeps working; an operator
-- finds the renamed ones in `clients list`. Should an appended name still collide, the
-- unique index below fails the migration, and with it the command that applied it.

with ranked as (
    select client_id,
        row_number() over (
            partition by name
            order by (status = 'Active') desc, created_at, client_id
        ) as rank
    from identity.clients
)
update identity.clients as c
-- 61 characters of the name, then ' (' and the 36 of the id and ')': within varchar(100).
set name = left(c.name, 61) || ' (' || c.client_id || ')',
    version = c.version + 1
from ranked as r
where r.client_id = c.client_id and r.rank > 1;

create unique index ux_clients_name on identity.clients (name);

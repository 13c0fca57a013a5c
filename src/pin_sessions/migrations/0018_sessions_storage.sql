-- SPEC §11, the heartbeat's storage. Every Active session's row is rewritten once a minute by
-- its device's heartbeat, and never as a HOT update: seed 003's
-- ix_sessions_active_last_activity indexes the column the heartbeat sets. So at A Active
-- devices the table gets A/60 new row versions a second (16,667/s at 1M), each with a new
-- entry in every index, and as many dead versions. The indexes stay as the seed defines them;
-- what this sets is the room on the table's pages and how soon autovacuum comes back.
-- Measured in BENCHMARKS.md ("The heartbeat's storage").
--
-- A session row with a real browser's device columns is about 220 bytes with its line
-- pointer: about 37 rows fill an 8 KB page.
--
-- fillfactor = 80: inserts (session starts) leave a fifth of each page free, about 7 row
-- versions beside its ~29 rows, which only updates may use. A heartbeat's new version then
-- goes on its own page, and the previous version's space is reclaimed by the page's next
-- pruning as soon as no snapshot still sees it. Pruning waits for the oldest snapshot of the
-- database (a closer batch, a report, a replica's feedback): while it waits, each page
-- gets (rows on it) x (seconds) / 60 new versions, so a fifth of the page (25 % of its rows)
-- covers a quarter of a minute of snapshot age before a version must move to another page.
-- Rows that never change again (Inactive history) pay the same fifth.
--
-- autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 50000: the default
-- trigger (50 + 20 % of the rows) grows with the Inactive history kept for 12 months while
-- the dead versions grow only with A, so a table of history would be vacuumed hours apart.
-- Vacuum must come back within minutes: pruning leaves each dead version's 4-byte line
-- pointer until vacuum, and a page holds at most 291, so a page of ~29 rows rewritten every
-- minute runs out of line pointers after about (291 - 29) / 29 = 9 minutes without vacuum;
-- from then on every new version leaves its page. A fixed 50,000 dead versions (under
-- 2 MB per index, about 11 MB of heap) triggers it: from 50,000 Active devices up, that is
-- less than one minute of heartbeats, so the table is vacuumed at every autovacuum_naptime
-- (1 min) — or back to back when a pass takes longer; below that, every 50,000 heartbeats.
--
-- autovacuum_vacuum_insert_scale_factor = 0, autovacuum_vacuum_insert_threshold = 50000:
-- the same for session starts (A/20 a minute at 20-minute sessions), so that new pages get
-- their visibility-map bits without waiting for 20 % of the history to be inserted again.
--
-- autovacuum_vacuum_cost_limit = 1000, autovacuum_vacuum_cost_delay = 2 (ms): each pass
-- reads every index page (btree vacuum scans whole indexes) and dirties each page that
-- holds Active rows: at 1M Active, ~34,000 heap pages and ~12,000 index leaf pages, about
-- 1M cost units (20 a page dirtied, 1–2 a page read). PostgreSQL's default budget, 200 per
-- 2 ms, is 100,000 units a second, 10 s a pass at 1M and 25 s at 2.5M: a pass would take
-- much of each minute. Five times that, 500,000 units a second, takes about 2 s at 1M and
-- caps vacuum's own writing at 25,000 pages (200 MB) a second. Pages the heartbeats
-- already dirtied cost vacuum nothing more, so a pass is cheaper than this in practice.
-- A per-table cost limit also takes this table out of the balancing between workers, so
-- vacuuming other tables at once does not slow it.
--
-- Lock: ALTER TABLE … SET of these parameters takes SHARE UPDATE EXCLUSIVE, which
-- heartbeats' ROW EXCLUSIVE does not conflict with, and rewrites nothing: existing pages
-- keep their rows and take the new fillfactor as rows are written. Every parameter exists
-- since PostgreSQL 13.
alter table user_activity.sessions set (
    fillfactor = 80,
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 50000,
    autovacuum_vacuum_insert_scale_factor = 0,
    autovacuum_vacuum_insert_threshold = 50000,
    autovacuum_vacuum_cost_limit = 1000,
    autovacuum_vacuum_cost_delay = 2
);

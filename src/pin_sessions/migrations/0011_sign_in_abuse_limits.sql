-- SPEC §8 abuse limits: besides the 5 per phone per 15 min, sign-in requests are limited
-- per client address (per hour) and for the whole service (per minute). Both are counted
-- from the requests themselves, so every instance of the API sees the same counts.

-- What the per-address limit counts by: the IPv4 address, or an IPv6 client's /64 (a
-- client commonly holds all of it). Null when the address is unknown.
alter table identity.sign_in_confirmation_requests
    add column ip_network varchar(45) null;

create index ix_sicr_ip_network_created_at
    on identity.sign_in_confirmation_requests (ip_network, created_at)
    where ip_network is not null;

-- The service-wide limit reads the newest requests of every phone.
create index ix_sicr_created_at
    on identity.sign_in_confirmation_requests (created_at);

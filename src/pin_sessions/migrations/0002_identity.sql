-- identity: users, sign-in confirmation requests (SICR) and refresh sessions (SPEC §3).
-- Enum values are stored as text; every row carries `version` for optimistic checks.

create table identity.users (
    id uuid primary key,
    phone_number varchar(16) not null,
    created_at timestamptz not null,
    version int not null default 1,
    constraint ux_users_phone_number unique (phone_number)
);

create table identity.sign_in_confirmation_requests (
    id uuid primary key,
    phone_number varchar(16) not null,
    code_hash bytea not null,
    attempts int not null default 0,
    status varchar(16) not null,
    created_at timestamptz not null,
    expires_at timestamptz not null,
    confirmed_at timestamptz null,
    ip_address varchar(45) null,
    version int not null default 1,
    constraint chk_sicr_status check (status in ('Pending', 'Confirmed', 'Expired')),
    constraint chk_sicr_attempts_nonneg check (attempts >= 0)
);

-- ExpireSessionsJob (seed 000) claims expired Pending requests through this index.
create index ix_sicr_expires_at
    on identity.sign_in_confirmation_requests (expires_at)
    where status = 'Pending';

-- The per-phone request cap (5 per 15 min) counts recent requests of one phone.
create index ix_sicr_phone_number_created_at
    on identity.sign_in_confirmation_requests (phone_number, created_at);

create table identity.refresh_sessions (
    id uuid primary key,
    user_id uuid not null references identity.users (id),
    family_id uuid not null,
    token_hash bytea not null,
    status varchar(16) not null,
    created_at timestamptz not null,
    expires_at timestamptz not null,
    last_used_at timestamptz not null,
    rotated_at timestamptz null,
    replaced_by uuid null,
    revoked_at timestamptz null,
    revoked_reason varchar(32) null,
    device_user_agent varchar(1024) not null,
    device_ip varchar(45) null,
    version int not null default 1,
    constraint ux_refresh_sessions_token_hash unique (token_hash),
    constraint chk_refresh_sessions_status
        check (status in ('Active', 'Rotated', 'Revoked', 'Expired')),
    constraint chk_refresh_sessions_revoked_reason
        check (revoked_reason is null
               or revoked_reason in ('Logout', 'RevokedByUser', 'TokenReuse', 'Admin'))
);

-- ExpireSessionsJob (seed 000) claims expired Active sessions through this index.
create index ix_refresh_sessions_expires_at
    on identity.refresh_sessions (expires_at)
    where status = 'Active';

create index ix_refresh_sessions_user_id on identity.refresh_sessions (user_id);

-- Reuse detection revokes every Active session of a rotation family.
create index ix_refresh_sessions_family_id
    on identity.refresh_sessions (family_id)
    where status = 'Active';

-- Permissions a user's access tokens carry (SPEC §3 `permissions` claim), granted by an
-- operator with `pin-sessions users grant`; read at every token issue, so a grant or a
-- revoke takes effect at the user's next sign-in or refresh.
create table identity.user_permissions (
    user_id uuid not null references identity.users (id) on delete cascade,
    permission varchar(128) not null,
    granted_at timestamptz not null,
    constraint pk_user_permissions primary key (user_id, permission)
);

-- Sign-in codes kept readable for `GET /dev/sign-in-codes/{requestId}`, written only when
-- PIN_DEV_CODES=1 (refused in prod). A table rather than process memory, so every API
-- process of `serve --workers N` answers; removed together with its request.
create table identity.dev_sign_in_codes (
    request_id uuid primary key
        references identity.sign_in_confirmation_requests (id) on delete cascade,
    code varchar(6) not null
);

-- user-activity: the device Session aggregate (seed 003) and its children (SPEC §5).
-- Enum values are stored as text.

create table user_activity.sessions (
    id uuid primary key,
    anonymous_id uuid not null,
    -- Logical reference to identity.users: another context, so no physical foreign key.
    user_id uuid null,
    linked_at timestamptz null,
    status varchar(16) not null,
    created_at timestamptz not null,
    last_activity_at timestamptz not null,
    ended_at timestamptz null,
    duration interval null,
    device_user_agent varchar(1024) not null,
    device_type varchar(16) not null,
    device_os varchar(128) null,
    device_browser varchar(128) null,
    device_ip varchar(45) null,
    constraint chk_sessions_link_pair check ((user_id is null) = (linked_at is null)),
    constraint chk_sessions_duration_nonneg check (duration >= interval '0'),
    constraint chk_sessions_status check (status in ('Active', 'Inactive')),
    constraint chk_sessions_device_type
        check (device_type in ('Desktop', 'Mobile', 'Tablet', 'Bot', 'Unknown'))
);

-- INV-SES-001: at most one Active session per device; the insurance behind startSession.
create unique index ux_sessions_active_anonymous
    on user_activity.sessions (anonymous_id)
    where status = 'Active';

-- The session history of one device.
create index ix_sessions_anonymous_id
    on user_activity.sessions (anonymous_id, created_at desc);

-- The session history of one user.
create index ix_sessions_user_id
    on user_activity.sessions (user_id)
    where user_id is not null;

-- ActivityCloserJob claims idle Active sessions through this index.
create index ix_sessions_active_last_activity
    on user_activity.sessions (last_activity_at)
    where status = 'Active';

create table user_activity.property_object_views (
    id uuid primary key,
    session_id uuid not null references user_activity.sessions (id) on delete restrict,
    property_object_id uuid not null,
    -- Snapshot of the session's user when the view started; never rewritten by a later link.
    user_id uuid null,
    started_at timestamptz not null,
    ended_at timestamptz null,
    duration interval null,
    constraint chk_property_object_views_duration_nonneg check (duration >= interval '0'),
    constraint chk_property_object_views_end_pair check ((ended_at is null) = (duration is null))
);

create index ix_property_object_views_session_id
    on user_activity.property_object_views (session_id, started_at);

-- Closing a session closes its open views (INV-LV-007): found through this index.
create index ix_property_object_views_open
    on user_activity.property_object_views (session_id)
    where ended_at is null;

create table user_activity.action_events (
    id uuid primary key,
    session_id uuid not null references user_activity.sessions (id) on delete restrict,
    -- Snapshot of the session's user at the time of the action.
    user_id uuid null,
    type varchar(64) not null,
    property_object_id uuid null,
    data jsonb null,
    created_at timestamptz not null
);

create index ix_action_events_session_id
    on user_activity.action_events (session_id, created_at);

-- SPEC §8: the ES256 keys that sign every token, shared by every instance. The private
-- half is AES-GCM encrypted under a key derived from PIN_SECRET_KEY (nonce || ciphertext,
-- the kid as associated data); the public half is the JWK that /.well-known/jwks.json lists.

create table identity.signing_keys (
    kid text primary key,
    public_jwk jsonb not null,
    private_key bytea not null,
    status varchar(16) not null,
    created_at timestamptz not null,
    activated_at timestamptz null,
    retired_at timestamptz null,
    version int not null default 1,
    constraint chk_signing_keys_status check (status in ('Next', 'Current', 'Retired'))
);

-- At most one key signs and at most one waits to: two instances rotating at once create
-- one key, whatever their timing (the second insert does nothing).
create unique index ux_signing_keys_one_current on identity.signing_keys ((true))
    where status = 'Current';
create unique index ux_signing_keys_one_next on identity.signing_keys ((true))
    where status = 'Next';

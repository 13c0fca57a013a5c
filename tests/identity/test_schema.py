"""Identity's tables carry SPEC §3's names, which ExpireSessionsJob and others code against."""

from __future__ import annotations

from pin_sessions.platform.runtime import Runtime

SELECT_INDEXES = """
select indexname, indexdef from pg_indexes where schemaname = 'identity'
"""

SELECT_COLUMNS = """
select table_name, column_name from information_schema.columns where table_schema = 'identity'
"""


async def test_the_identity_tables_have_the_columns_of_the_spec(runtime: Runtime) -> None:
    async with runtime.database.connection() as conn:
        rows = await conn.fetch(SELECT_COLUMNS)
    columns: dict[str, set[str]] = {}
    for row in rows:
        columns.setdefault(row["table_name"], set()).add(row["column_name"])
    assert columns["users"] >= {"id", "phone_number", "created_at", "version"}
    assert columns["sign_in_confirmation_requests"] >= {
        "id", "phone_number", "code_hash", "attempts", "status", "created_at", "expires_at",
        "confirmed_at", "ip_address", "version",
    }  # fmt: skip
    assert columns["refresh_sessions"] >= {
        "id", "user_id", "family_id", "token_hash", "status", "created_at", "expires_at",
        "last_used_at", "rotated_at", "replaced_by", "revoked_at", "revoked_reason",
        "device_user_agent", "device_ip", "version",
    }  # fmt: skip
    assert columns["signing_keys"] >= {
        "kid", "public_jwk", "private_key", "status", "created_at", "activated_at", "retired_at",
    }  # fmt: skip
    assert columns["clients"] >= {
        "client_id", "name", "secret_hash", "scopes", "status", "created_at", "updated_at",
        "version",
    }  # fmt: skip


async def test_the_partial_expiry_indexes_exist_with_their_predicates(runtime: Runtime) -> None:
    async with runtime.database.connection() as conn:
        indexes = {row["indexname"]: row["indexdef"] for row in await conn.fetch(SELECT_INDEXES)}
    assert "(expires_at) WHERE ((status)::text = 'Pending'::text)" in indexes["ix_sicr_expires_at"]
    assert (
        "(expires_at) WHERE ((status)::text = 'Active'::text)"
        in (indexes["ix_refresh_sessions_expires_at"])
    )
    assert "(user_id)" in indexes["ix_refresh_sessions_user_id"]
    assert "UNIQUE" in indexes["ux_refresh_sessions_token_hash"]
    assert "UNIQUE" in indexes["ux_users_phone_number"]


async def test_the_retention_index_orders_terminal_refresh_sessions_by_creation(
    runtime: Runtime,
) -> None:
    async with runtime.database.connection() as conn:
        indexes = {row["indexname"]: row["indexdef"] for row in await conn.fetch(SELECT_INDEXES)}
    assert "ix_refresh_sessions_retention_last_transition" not in indexes
    assert (
        "(created_at) WHERE ((status)::text = ANY ((ARRAY['Rotated'::character varying, "
        "'Revoked'::character varying, 'Expired'::character varying])::text[]))"
        in indexes["ix_refresh_sessions_retention_created_at"]
    )


async def test_at_most_one_signing_key_is_current_and_one_is_next(runtime: Runtime) -> None:
    """SPEC §8: many instances rotate at once; the indexes leave one winner whatever happens."""
    async with runtime.database.connection() as conn:
        indexes = {row["indexname"]: row["indexdef"] for row in await conn.fetch(SELECT_INDEXES)}
    for name, status in (
        ("ux_signing_keys_one_current", "Current"),
        ("ux_signing_keys_one_next", "Next"),
    ):
        assert "UNIQUE" in indexes[name]
        assert f"WHERE ((status)::text = '{status}'::text)" in indexes[name]

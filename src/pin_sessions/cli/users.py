"""``pin-sessions users grant|revoke --phone E164 --permission P…``: a user's permissions."""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
from typing import TYPE_CHECKING

from pin_sessions.bootstrap import (
    build_identity_operations,
    build_runtime,
    database_endpoint,
    worker_database,
)
from pin_sessions.cli.common import EXIT_FAILURE, EXIT_USAGE
from pin_sessions.identity.domain import PERMISSION_PATTERN
from pin_sessions.identity.errors import UnknownPhoneNumber
from pin_sessions.platform.phone_numbers import E164_PATTERN

if TYPE_CHECKING:
    from pin_sessions.cli.common import Commands
    from pin_sessions.settings import Settings


def add_parsers(commands: Commands) -> None:
    users = commands.add_parser("users", help="manage users' permissions").add_subparsers(
        dest="users_action", required=True
    )
    for action, text in (("grant", "grant permissions"), ("revoke", "withdraw permissions")):
        change = users.add_parser(action, help=f"{text} (effective at the next token issue)")
        change.add_argument("--phone", required=True, help="the user's E.164 phone number")
        change.add_argument(
            "--permission", action="extend", nargs="+", required=True, type=_permission
        )
        change.set_defaults(run=run)


def _permission(value: str) -> str:
    if not PERMISSION_PATTERN.fullmatch(value):
        raise argparse.ArgumentTypeError(f"{value!r} is not a permission such as dev-stats.view")
    return value


def run(settings: Settings, args: argparse.Namespace) -> int:
    """Grant or withdraw permissions; prints the user id and the change, never the phone."""
    action: str = args.users_action
    phone: str = args.phone
    permissions: list[str] = args.permission
    if not re.fullmatch(E164_PATTERN, phone):
        print("pin-sessions: --phone must be an E.164 number such as +15550100", file=sys.stderr)
        return EXIT_USAGE

    async def change(dsn: str) -> str:
        runtime = build_runtime(settings, dsn, database=worker_database(settings, dsn, max_size=1))
        await runtime.database.open()
        try:
            operations = build_identity_operations(runtime)
            if action == "grant":
                user_id = await operations.grant_permissions(
                    phone, permissions, runtime.clock.now()
                )
            else:
                user_id = await operations.withdraw_permissions(phone, permissions)
            return str(user_id)
        finally:
            await runtime.database.close()

    with database_endpoint(settings) as dsn:
        try:
            user_id = asyncio.run(change(dsn))
        except UnknownPhoneNumber as exc:
            print(f"pin-sessions: {exc.detail}", file=sys.stderr)
            return EXIT_FAILURE
    print(json.dumps({"userId": user_id, action: sorted(set(permissions))}))
    return 0

"""``pin-sessions users …``: an operator's tools for one user, named by phone number.

``grant|revoke --phone E164 --permission P…``: permissions, only the catalogue's, which
``permissions`` lists. ``export --phone E164``: every context's data of the user as one
JSON document on stdout. ``erase --phone E164``: the erasure, then a wait until every
context has applied it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from pin_sessions.bootstrap.identity import build_identity_operations
from pin_sessions.cli.common import (
    EXIT_FAILURE,
    EXIT_USAGE,
    add_actions,
    add_command,
    run_one_shot,
)
from pin_sessions.dev_stats.consumers import UserErasedConsumer as DevStatsUserErasedConsumer
from pin_sessions.identity import repository as identity_repository
from pin_sessions.identity.errors import UnknownPhoneNumber
from pin_sessions.identity.user_data import RequestedBy, UserData
from pin_sessions.platform.database import Database
from pin_sessions.platform.messaging.runner import processed_by
from pin_sessions.platform.permissions import PERMISSION_DESCRIPTIONS, listed
from pin_sessions.platform.phone_numbers import E164_PATTERN
from pin_sessions.platform.runtime import Runtime
from pin_sessions.platform.streamed_json import stream_json
from pin_sessions.user_activity.consumers import UserErasedConsumer as ActivityUserErasedConsumer
from pin_sessions.user_activity.user_data import ActivityData

if TYPE_CHECKING:
    from pin_sessions.cli.common import Commands
    from pin_sessions.settings import Settings


PHONE_HELP = "the user's E.164 phone number, such as +15550100"


def add_parsers(commands: Commands) -> None:
    users = add_actions(
        add_command(commands, "users", "one user's permissions, export and erasure, by phone"),
        "users_action",
    )
    for action, text in (("grant", "grant permissions"), ("revoke", "withdraw permissions")):
        change = add_command(users, action, f"{text} (effective at the next token issue)")
        change.add_argument("--phone", required=True, metavar="E164", help=PHONE_HELP)
        change.add_argument(
            "--permission",
            action="extend",
            nargs="+",
            required=True,
            type=_permission,
            metavar="PERMISSION",
            help=f"one or more of {listed(PERMISSION_DESCRIPTIONS)} (see `users permissions`)",
        )
        change.set_defaults(run=run)
    add_command(users, "permissions", "the permissions a user may be granted").set_defaults(
        run=run_permissions
    )
    export = add_command(users, "export", "print everything every context holds of the user")
    export.add_argument("--phone", required=True, metavar="E164", help=PHONE_HELP)
    export.set_defaults(run=run_export)
    erase = add_command(
        users, "erase", "erase the user, then wait until every context has applied it"
    )
    erase.add_argument("--phone", required=True, metavar="E164", help=PHONE_HELP)
    erase.add_argument(
        "--wait-seconds",
        type=float,
        default=60.0,
        metavar="S",
        help="how long to wait for the contexts (0: do not wait); default 60",
    )
    erase.set_defaults(run=run_erase)


def _permission(value: str) -> str:
    if value not in PERMISSION_DESCRIPTIONS:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a permission; the permissions are {listed(PERMISSION_DESCRIPTIONS)}"
        )
    return value


def run_permissions(settings: Settings, args: argparse.Namespace) -> int:
    """Print the catalogue's permissions and what each allows; no database is asked."""
    permissions = [
        {"name": name, "description": text} for name, text in PERMISSION_DESCRIPTIONS.items()
    ]
    print(json.dumps({"permissions": permissions}))
    return 0


def _valid_phone(phone: str) -> bool:
    if re.fullmatch(E164_PATTERN, phone):
        return True
    print("pin-sessions: --phone must be an E.164 number such as +15550100", file=sys.stderr)
    return False


def run(settings: Settings, args: argparse.Namespace) -> int:
    """Grant or withdraw permissions; prints the user id and the change, never the phone."""
    action: str = args.users_action
    phone: str = args.phone
    permissions: list[str] = args.permission
    if not _valid_phone(phone):
        return EXIT_USAGE

    async def change(runtime: Runtime) -> str:
        operations = build_identity_operations(runtime)
        if action == "grant":
            user_id = await operations.grant_permissions(phone, permissions, runtime.clock.now())
        else:
            user_id = await operations.withdraw_permissions(phone, permissions)
        return str(user_id)

    try:
        user_id = run_one_shot(settings, change)
    except UnknownPhoneNumber as exc:
        print(f"pin-sessions: {exc.detail}", file=sys.stderr)
        return EXIT_FAILURE
    print(json.dumps({"userId": user_id, action: sorted(set(permissions))}))
    return 0


class _NoSuchUser(Exception):
    """No user has the phone number: one line, exit 1."""


async def _user_of(database: Database, phone: str) -> uuid.UUID:
    async with database.connection() as conn:
        user_id = await identity_repository.find_user_by_phone(conn, phone)
    if user_id is None:
        raise _NoSuchUser()
    return user_id


def _operator_task(settings: Settings, task: Callable[[Runtime], Awaitable[int]]) -> int:
    """Run ``task`` as a one-shot command; an unknown phone is one line and exit 1."""
    try:
        return run_one_shot(settings, task)
    except _NoSuchUser:
        print("pin-sessions: no user has this phone number", file=sys.stderr)
        return EXIT_FAILURE


def run_export(settings: Settings, args: argparse.Namespace) -> int:
    """``{"identity": …, "userActivity": …}`` on stdout, written as it is read."""
    phone: str = args.phone
    if not _valid_phone(phone):
        return EXIT_USAGE

    async def export(runtime: Runtime) -> int:
        user_id = await _user_of(runtime.database, phone)
        now = runtime.clock.now()
        document = {
            "userId": user_id,
            "exportedAt": now,
            "identity": await UserData(runtime.database).export(user_id, now),
            "userActivity": await ActivityData(runtime.database).export(user_id, now),
        }
        out = sys.stdout.buffer
        async for chunk in stream_json(document):
            out.write(chunk)
        out.write(b"\n")
        out.flush()
        return 0

    return _operator_task(settings, export)


# The consumer that applies an erasure in each other context.
ERASURE_CONSUMERS = {
    "user-activity": ActivityUserErasedConsumer.consumer,
    "dev-stats": DevStatsUserErasedConsumer.consumer,
}
POLL_SECONDS = 0.2


def run_erase(settings: Settings, args: argparse.Namespace) -> int:
    """Erase; print the erasure, then each context as it applies it (JSON lines).

    Exit 0 once every context has; 1 when the wait ends first (the erasure stands, and the
    contexts apply it when their consumers run).
    """
    phone: str = args.phone
    wait_seconds: float = args.wait_seconds
    if not _valid_phone(phone):
        return EXIT_USAGE

    async def erase(runtime: Runtime) -> int:
        user_id = await _user_of(runtime.database, phone)
        erasure = await UserData(runtime.database).erase(
            user_id, RequestedBy.OPERATOR, runtime.clock.now()
        )
        _print_line(
            {
                "userId": str(erasure.user_id),
                "erasedAt": erasure.requested_at.isoformat(),
                "messageId": str(erasure.message_id),
            }
        )
        pending = dict(ERASURE_CONSUMERS)
        deadline = time.monotonic() + wait_seconds
        while pending:
            async with runtime.database.connection() as conn:
                applied = await processed_by(conn, erasure.message_id, list(pending.values()))
            for context, consumer in list(pending.items()):
                done = applied.get(consumer)
                if done is None:
                    continue
                if done.parked:
                    print(
                        f"pin-sessions: {context} could not apply the erasure; it is parked in "
                        f"messaging.dead_letters for {consumer}",
                        file=sys.stderr,
                    )
                    return EXIT_FAILURE
                _print_line({"context": context, "appliedAt": done.at.isoformat()})
                del pending[context]
            if pending and time.monotonic() >= deadline:
                print(
                    "pin-sessions: erased in identity; not yet applied by "
                    + ", ".join(sorted(pending))
                    + " (their consumers apply it when they run)",
                    file=sys.stderr,
                )
                return EXIT_FAILURE
            if pending:
                await asyncio.sleep(POLL_SECONDS)
        return 0

    return _operator_task(settings, erase)


def _print_line(value: dict[str, str]) -> None:
    print(json.dumps(value), flush=True)

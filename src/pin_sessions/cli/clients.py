"""``pin-sessions clients create | list | scopes | rotate-secret ID | disable ID``.

Services registered for the client-credentials grant. ``create`` and ``rotate-secret``
print the secret once, in their JSON answer; nothing else ever shows it. ``scopes`` lists
the scopes a client may hold, the only ones ``create`` takes.
"""

from __future__ import annotations

import argparse
import json
import sys
import uuid
from typing import TYPE_CHECKING, Any

from pin_sessions.cli.common import EXIT_FAILURE, add_actions, add_command, run_one_shot
from pin_sessions.identity.clients import MAX_NAME_LENGTH, ServiceClients
from pin_sessions.identity.errors import IdentityError
from pin_sessions.platform.permissions import SCOPE_DESCRIPTIONS, listed

if TYPE_CHECKING:
    from pin_sessions.cli.common import Commands
    from pin_sessions.platform.runtime import Runtime
    from pin_sessions.settings import Settings


def add_parsers(commands: Commands) -> None:
    clients = add_actions(
        add_command(commands, "clients", "services allowed the client-credentials grant"),
        "clients_action",
    )
    create = add_command(clients, "create", "register a service; prints its secret once")
    create.add_argument(
        "--name", required=True, type=_name, help="a name no other client has, such as crm"
    )
    add_scope_option(create, required=True, text="the scopes it may hold")
    create.set_defaults(run=run)
    add_command(clients, "list", "every client, without secrets").set_defaults(run=run)
    add_command(clients, "scopes", "the scopes a client may hold").set_defaults(run=run_scopes)
    for action, text in (
        ("rotate-secret", "a new secret (printed once); the old one stops working"),
        ("disable", "no more tokens; its tokens are refused by internal routes within 30 s"),
    ):
        change = add_command(clients, action, text)
        change.add_argument("client_id", metavar="ID", type=_client_id, help="the client's id")
        change.set_defaults(run=run)


def add_scope_option(parser: argparse.ArgumentParser, *, required: bool, text: str) -> None:
    """``--scope S…``, repeatable (``--scope a b`` and ``--scope a --scope b`` both give
    ``a b``), taking only the catalogue's scopes."""
    parser.add_argument(
        "--scope",
        action="extend",
        nargs="+",
        required=required,
        default=None,
        type=_scope,
        metavar="SCOPE",
        help=f"{text}: {listed(SCOPE_DESCRIPTIONS)} (see `clients scopes`)",
    )


def _name(value: str) -> str:
    if not 0 < len(value) <= MAX_NAME_LENGTH or not value.isprintable():
        raise argparse.ArgumentTypeError(f"a name is 1 to {MAX_NAME_LENGTH} printable characters")
    return value


def _scope(value: str) -> str:
    if value not in SCOPE_DESCRIPTIONS:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a scope; the scopes are {listed(SCOPE_DESCRIPTIONS)}"
        )
    return value


def run_scopes(settings: Settings, args: argparse.Namespace) -> int:
    """Print the catalogue's scopes and what each allows; no database is asked."""
    scopes = [{"name": name, "description": text} for name, text in SCOPE_DESCRIPTIONS.items()]
    print(json.dumps({"scopes": scopes}))
    return 0


def _client_id(value: str) -> uuid.UUID:
    try:
        return uuid.UUID(value)
    except ValueError:
        raise argparse.ArgumentTypeError("a client id is a UUID") from None


def run(settings: Settings, args: argparse.Namespace) -> int:
    action: str = args.clients_action

    async def act(runtime: Runtime) -> dict[str, Any]:
        clients, now = ServiceClients(runtime.database), runtime.clock.now()
        if action == "create":
            client, secret = await clients.create(args.name, args.scope, now)
            return {**client.to_json(), "clientSecret": secret}
        if action == "list":
            return {"clients": [client.to_json() for client in await clients.registered()]}
        if action == "rotate-secret":
            secret = await clients.rotate_secret(args.client_id, now)
            return {"clientId": str(args.client_id), "clientSecret": secret}
        changed = await clients.disable(args.client_id, now)
        return {"clientId": str(args.client_id), "status": "Disabled", "changed": changed}

    try:
        answer = run_one_shot(settings, act)
    except IdentityError as exc:
        print(f"pin-sessions: {exc.detail}", file=sys.stderr)
        return EXIT_FAILURE
    print(json.dumps(answer))
    return 0

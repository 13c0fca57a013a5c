"""``pin-sessions clients create | list | rotate-secret ID | disable ID`` (SPEC §2, §8).

Services registered for the client-credentials grant. ``create`` and ``rotate-secret``
print the secret once, in their JSON answer; nothing else ever shows it.
"""

from __future__ import annotations

import argparse
import json
import sys
import uuid
from typing import TYPE_CHECKING, Any

from pin_sessions.cli.common import EXIT_FAILURE, run_one_shot
from pin_sessions.identity.clients import MAX_NAME_LENGTH, ServiceClients, is_scope
from pin_sessions.identity.errors import IdentityError

if TYPE_CHECKING:
    from pin_sessions.cli.common import Commands
    from pin_sessions.platform.runtime import Runtime
    from pin_sessions.settings import Settings


def add_parsers(commands: Commands) -> None:
    clients = commands.add_parser(
        "clients", help="services allowed the client-credentials grant"
    ).add_subparsers(dest="clients_action", required=True)
    create = clients.add_parser("create", help="register a service; prints its secret once")
    create.add_argument("--name", required=True, type=_name)
    create.add_argument("--scope", action="extend", nargs="+", required=True, type=_scope)
    create.set_defaults(run=run)
    clients.add_parser("list", help="every client, without secrets").set_defaults(run=run)
    for action, text in (
        ("rotate-secret", "a new secret (printed once); the old one stops working"),
        ("disable", "no more tokens; its tokens are refused by internal routes within 30 s"),
    ):
        change = clients.add_parser(action, help=text)
        change.add_argument("client_id", metavar="ID", type=_client_id)
        change.set_defaults(run=run)


def _name(value: str) -> str:
    if not 0 < len(value) <= MAX_NAME_LENGTH or not value.isprintable():
        raise argparse.ArgumentTypeError(f"a name is 1 to {MAX_NAME_LENGTH} printable characters")
    return value


def _scope(value: str) -> str:
    if not is_scope(value):
        raise argparse.ArgumentTypeError(f"{value!r} is not a scope such as user-activity.internal")
    return value


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

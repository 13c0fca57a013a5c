"""``pin-sessions token m2m --client ID|NAME [--scope SCOPE…]``: a development m2m token.

A convenience for development machines, refused when ``PIN_ENV=prod``: services get
their tokens from ``POST /oauth/token`` with their client's credentials. It
skips only the secret: the client must be registered (``clients create``) and Active, the
scopes must be its own, and the token is minted by the token endpoint's own use case, so
its claims are exactly those ``/oauth/token`` would give (``sub`` and ``client_id`` the
client's id).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from pin_sessions.bootstrap.identity import build_key_set, build_oauth_server
from pin_sessions.cli.clients import add_scope_option
from pin_sessions.cli.common import EXIT_FAILURE, EXIT_USAGE, add_actions, add_command, run_one_shot
from pin_sessions.identity.errors import IdentityError, InvalidScope
from pin_sessions.settings import Environment

if TYPE_CHECKING:
    import argparse

    from pin_sessions.cli.common import Commands
    from pin_sessions.platform.runtime import Runtime
    from pin_sessions.settings import Settings


def add_parsers(commands: Commands) -> None:
    token = add_actions(
        add_command(commands, "token", "mint tokens (development only)"), "token_kind"
    )
    m2m = add_command(
        token, "m2m", "a registered client's m2m token, as POST /oauth/token gives; refused in prod"
    )
    m2m.add_argument(
        "--client", required=True, metavar="ID|NAME", help="the client's id, or its name"
    )
    # Unset: all of the client's scopes, as the token endpoint does.
    add_scope_option(m2m, required=False, text="a subset of the client's scopes (default: all)")
    m2m.set_defaults(run=run_m2m)


def run_m2m(settings: Settings, args: argparse.Namespace) -> int:
    """Print an m2m token for a registered client and (a subset of) its scopes."""
    if settings.env is Environment.PROD:
        print(
            "pin-sessions: token m2m is refused when PIN_ENV=prod; "
            "register a client (`clients create`) and use POST /oauth/token",
            file=sys.stderr,
        )
        return EXIT_USAGE
    client_ref: str = args.client
    scopes: list[str] | None = args.scope

    async def mint(runtime: Runtime) -> str:
        oauth = build_oauth_server(runtime, build_key_set(runtime))
        client = await oauth.clients.find(client_ref)
        requested = None if scopes is None else " ".join(sorted(set(scopes)))
        grant = await oauth.client_credentials(client, requested, runtime.clock.now())
        return grant.access_token

    try:
        print(run_one_shot(settings, mint))
    except IdentityError as exc:
        print(f"pin-sessions: {exc.detail}", file=sys.stderr)
        return EXIT_FAILURE
    except InvalidScope as exc:
        print(f"pin-sessions: {exc.description}", file=sys.stderr)
        return EXIT_FAILURE
    return 0

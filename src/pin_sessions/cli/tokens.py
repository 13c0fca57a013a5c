"""``pin-sessions token m2m --client NAME --scope SCOPE…``: mint a machine-to-machine token."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pin_sessions.platform.auth import TokenCodec
from pin_sessions.platform.clock import SystemClock
from pin_sessions.platform.secrets import resolve_server_secrets

if TYPE_CHECKING:
    import argparse

    from pin_sessions.cli.common import Commands
    from pin_sessions.settings import Settings


def add_parsers(commands: Commands) -> None:
    token = commands.add_parser("token", help="mint tokens").add_subparsers(
        dest="token_kind", required=True
    )
    m2m = token.add_parser("m2m", help="a machine-to-machine token for the internal APIs")
    m2m.add_argument("--client", required=True)
    # Repeatable: `--scope a b` and `--scope a --scope b` both grant "a b".
    m2m.add_argument("--scope", action="extend", nargs="+", required=True)
    m2m.set_defaults(run=run_m2m)


def run_m2m(settings: Settings, args: argparse.Namespace) -> int:
    """Print an m2m token signed with the server secret the API uses."""
    codec = TokenCodec(resolve_server_secrets(settings).jwt_key)
    print(codec.issue_m2m_token(args.client, args.scope, now=SystemClock().now()))
    return 0

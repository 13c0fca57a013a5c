"""``pin-sessions token m2m --client NAME --scope SCOPE…``: a development m2m token.

A convenience for development machines, refused when ``PIN_ENV=prod``: services get
their tokens from ``POST /oauth/token`` with their client's credentials (SPEC §8).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from pin_sessions.bootstrap import build_token_signer
from pin_sessions.cli.common import EXIT_USAGE, run_one_shot
from pin_sessions.settings import Environment

if TYPE_CHECKING:
    import argparse

    from pin_sessions.cli.common import Commands
    from pin_sessions.platform.runtime import Runtime
    from pin_sessions.settings import Settings


def add_parsers(commands: Commands) -> None:
    token = commands.add_parser("token", help="mint tokens (development only)").add_subparsers(
        dest="token_kind", required=True
    )
    m2m = token.add_parser("m2m", help="an m2m token for the internal APIs; refused in prod")
    m2m.add_argument("--client", required=True)
    # Repeatable: `--scope a b` and `--scope a --scope b` both grant "a b".
    m2m.add_argument("--scope", action="extend", nargs="+", required=True)
    m2m.set_defaults(run=run_m2m)


def run_m2m(settings: Settings, args: argparse.Namespace) -> int:
    """Print an m2m token signed with the Current key, as the token endpoint would."""
    if settings.env is Environment.PROD:
        print(
            "pin-sessions: token m2m is refused when PIN_ENV=prod; "
            "register a client (`clients create`) and use POST /oauth/token",
            file=sys.stderr,
        )
        return EXIT_USAGE
    client: str = args.client
    scopes: list[str] = args.scope

    async def mint(runtime: Runtime) -> str:
        async with runtime.database.connection() as conn:
            signed = await build_token_signer(runtime).m2m_token(
                conn, client, scopes, now=runtime.clock.now()
            )
        return signed.token

    print(run_one_shot(settings, mint))
    return 0

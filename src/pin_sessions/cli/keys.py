"""``pin-sessions keys list | rotate [--now]``: the token signing keys.

``rotate`` publishes a Next key now; the ``signing-keys`` job makes it Current once it
has been published for ``PIN_SIGNING_KEYS__PUBLISH_AHEAD``. ``rotate --now`` is for a
leaked key: a new key signs the very next token on every instance, and the Current key
(with any Next one) is deleted, so its tokens are refused by every instance within the
key set's cache age (5 s).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from pin_sessions.bootstrap.keys import build_signing_key_operations
from pin_sessions.cli.common import add_actions, add_command, run_one_shot

if TYPE_CHECKING:
    import argparse

    from pin_sessions.cli.common import Commands
    from pin_sessions.platform.runtime import Runtime
    from pin_sessions.settings import Settings


def add_parsers(commands: Commands) -> None:
    keys = add_actions(add_command(commands, "keys", "token signing keys"), "keys_action")
    add_command(keys, "list", "every key and its status").set_defaults(run=run)
    rotate = add_command(keys, "rotate", "publish the next key now")
    rotate.add_argument(
        "--now", action="store_true", help="a leaked key: replace it at once, deleting it"
    )
    rotate.set_defaults(run=run)


def run(settings: Settings, args: argparse.Namespace) -> int:
    action: str = args.keys_action
    at_once: bool = getattr(args, "now", False)

    async def act(runtime: Runtime) -> dict[str, Any]:
        operations, now = build_signing_key_operations(runtime), runtime.clock.now()
        if action == "list":
            keys = await operations.all()
        elif at_once:
            keys, deleted = await operations.rotate_now(now)
            return {"keys": [key.to_json() for key in keys], "deleted": deleted}
        else:
            keys = await operations.rotate(now)
        return {"keys": [key.to_json() for key in keys]}

    print(json.dumps(run_one_shot(settings, act)))
    return 0

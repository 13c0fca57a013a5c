"""``pin-sessions`` — every role of the service from one command line.

Exit status: 0 success, 1 runtime failure, 2 bad settings or usage.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping, Sequence
from importlib.metadata import version

import structlog

from pin_sessions.cli import clients, jobs, keys, messaging, migrate, serve, tokens, up, users
from pin_sessions.cli.common import EXIT_FAILURE, EXIT_USAGE, Command, configure_process_logging
from pin_sessions.platform.embedded import (
    DatabaseLost,
    DataDirBusy,
    RuntimeDirRefused,
    private_runtime_dir,
)
from pin_sessions.platform.listening import CannotListen
from pin_sessions.platform.messaging.kafka import ClientOptionsRejected, check_client_options
from pin_sessions.platform.process import RoleCannotRun
from pin_sessions.platform.served_url import served_public_url
from pin_sessions.settings import (
    RECOMMENDED_SECRET_KEY_LENGTH,
    Settings,
    SettingsError,
    load_settings,
)

# Where the embedded server's wheel keeps its lock (see private_runtime_dir).
RUNTIME_DIR_VARIABLE = "XDG_RUNTIME_DIR"

log = structlog.get_logger("pin_sessions.cli")

# The commands that listen themselves: their public URL follows their own address.
LISTENING_COMMANDS = frozenset({"up", "serve"})

# In the order `--help` lists them; each module registers its commands and their `run`.
COMMAND_GROUPS = (up, migrate, serve, jobs, messaging, tokens, clients, keys, users)


# The distribution's name, whose version `--version` prints.
DISTRIBUTION = "pin-sessions"
DESCRIPTION = """Every role of PIN Sessions from one command line: the API, the jobs,
the relay and consumers, and an operator's commands (`COMMAND --help` for each).

Exit status: 0 success, 1 runtime failure, 2 bad settings or usage."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pin-sessions",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {version(DISTRIBUTION)}")
    commands = parser.add_subparsers(
        dest="command", metavar="COMMAND", title="commands", required=True
    )
    for group in COMMAND_GROUPS:
        group.add_parsers(commands)
    return parser


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    """The program: settings from ``environ`` (by default the process environment), then the
    command's ``run``."""
    args = build_parser().parse_args(argv)
    try:
        settings = load_settings(os.environ if environ is None else environ)
        _check_kafka_options(settings)
        if args.command not in LISTENING_COMMANDS:
            settings = beside_running_up(settings)
    except (SettingsError, ClientOptionsRejected) as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_USAGE
    args.console = configure_process_logging(settings)
    if settings.reads_deprecated_secret_name:
        log.warning("PIN_JWT_SECRET is deprecated: set PIN_SECRET_KEY instead")
    if settings.secret_key_is_short:
        # That it is short is all that is said: the value never reaches a log.
        log.warning(
            "PIN_SECRET_KEY is shorter than recommended",
            recommendedLength=RECOMMENDED_SECRET_KEY_LENGTH,
        )
    command: Command = args.run
    try:
        messaging.check_kafka_at_start(settings, args.command)
        _give_embedded_a_runtime_dir(settings)
        return command(settings, args)
    except RoleCannotRun as exc:
        # At start or later: a setting Kafka refuses, a topic the relay may not create.
        print(str(exc), file=sys.stderr)
        return exc.exit_status
    except SettingsError as exc:
        # A rule of the role the command starts (the API's), checked before it starts.
        print(str(exc), file=sys.stderr)
        return EXIT_USAGE
    except (DataDirBusy, DatabaseLost, RuntimeDirRefused, CannotListen) as exc:
        print(f"pin-sessions: {exc}", file=sys.stderr)
        return EXIT_FAILURE


def beside_running_up(settings: Settings) -> Settings:
    """An unset ``PIN_PUBLIC_URL`` becomes the one an ``up`` on the same data directory serves,
    so what this command mints (``token m2m``) names the issuer that server accepts."""
    if settings.public_url is not None:
        return settings
    served = served_public_url(settings.data_dir)
    return settings if served is None else settings.model_copy(update={"public_url": served})


def _check_kafka_options(settings: Settings) -> None:
    """A PIN_KAFKA__* value librdkafka refuses stops every command at start, as any bad setting."""
    if settings.kafka_bootstrap_servers:
        check_client_options(settings.kafka_bootstrap_servers, settings.kafka.librdkafka_options())


def _give_embedded_a_runtime_dir(settings: Settings) -> None:
    """Before the embedded server's wheel is imported, which reads it once (and would warn)."""
    if settings.database_url is None and not os.environ.get(RUNTIME_DIR_VARIABLE):
        os.environ[RUNTIME_DIR_VARIABLE] = str(private_runtime_dir())

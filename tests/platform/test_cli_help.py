"""The command line explains itself: help on every command and option, errors by option names,
its version, and no reference to a document the repository does not contain."""

from __future__ import annotations

import argparse
import re
import subprocess
from collections.abc import Iterator
from importlib.metadata import version

from pin_sessions.cli import build_parser
from tests.support.cli import run_cli
from tests.support.processes import PROJECT_ROOT

# What a reader of the repository cannot follow: a specification's sections, seeds, invariants.
FOREIGN_REFERENCE = re.compile(r"SPEC|§|\bseed \d|\bINV-")


def _parsers() -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """Every parser of the program, by its command line (``pin-sessions clients create``)."""
    pending = [build_parser()]
    while pending:
        parser = pending.pop()
        yield parser.prog, parser
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                pending.extend(action.choices.values())


def test_every_command_and_option_has_help() -> None:
    walked = []
    for prog, parser in _parsers():
        walked.append(prog)
        assert parser.description, f"{prog} has no description"
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for listed in action._choices_actions:
                    assert listed.help, f"{prog} {listed.dest} has no help"
                continue
            name = "/".join(action.option_strings) or action.dest
            assert action.help and action.help != argparse.SUPPRESS, f"{prog} {name} has no help"
    # The walk reached the leaves.
    assert {"pin-sessions clients create", "pin-sessions token m2m", "pin-sessions job"} <= set(
        walked
    )


def test_usage_errors_name_options_never_internal_names() -> None:
    """An argument's name in an error is its metavar when it has no option string: every
    positional and every choice of an action names one for people, not a ``dest``."""
    for prog, parser in _parsers():
        for action in parser._actions:
            if not action.option_strings:
                assert action.metavar, f"{prog}: {action.dest} would be named by its dest"
    missing = run_cli("clients", env={})
    assert missing.returncode == 2
    assert "the following arguments are required: ACTION" in missing.stderr
    assert "clients_action" not in missing.stderr
    unknown = run_cli("job", "expire-session", env={})
    assert unknown.returncode == 2
    assert "argument NAME: invalid choice: 'expire-session'" in unknown.stderr


def test_version_prints_the_package_version() -> None:
    ran = run_cli("--version", env={})
    assert (ran.returncode, ran.stdout) == (0, f"pin-sessions {version('pin-sessions')}\n")


def test_no_help_cites_a_document_the_repository_lacks() -> None:
    for prog, parser in _parsers():
        text = parser.format_help()
        assert not FOREIGN_REFERENCE.search(text), f"{prog} --help:\n{text}"


def test_make_help_lists_every_target_with_a_line() -> None:
    makefile = (PROJECT_ROOT / "Makefile").read_text()
    phony = re.search(r"^\.PHONY:(.*)$", makefile, re.MULTILINE)
    assert phony is not None
    shown = subprocess.run(
        ["make", "--no-print-directory", "-s", "help"],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout
    described = dict(
        line.strip().split(None, 1) for line in shown.splitlines() if line.startswith("  ")
    )
    for target in phony.group(1).split():
        assert described.get(target, "").strip(), f"make help does not describe {target}"

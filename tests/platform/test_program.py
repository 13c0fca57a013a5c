"""Both ways of starting the service enter through ``pin_sessions.program``, which imports
with the garbage collector off, freezes what it imported and leaves the collector on.

A fresh interpreter: this one has imported everything already.
"""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import entry_points

# `python -m pin_sessions --help`, as the interpreter runs it, then the collector's state.
PYTHON_M = (
    "import gc, runpy, sys\n"
    "sys.argv = ['pin-sessions', '--help']\n"
    "try:\n"
    "    runpy.run_module('pin_sessions', run_name='__main__', alter_sys=True)\n"
    "except SystemExit as exit:\n"
    "    print(exit.code)\n"
    "print(gc.isenabled(), gc.get_freeze_count())\n"
)


def test_the_command_enters_through_the_program() -> None:
    (script,) = entry_points(group="console_scripts", name="pin-sessions")
    assert script.value == "pin_sessions.program:main"


def test_python_m_freezes_its_imports_and_leaves_the_collector_on() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PYTHON_M], capture_output=True, text=True, check=True, timeout=60
    )
    *_, status, collector = done.stdout.splitlines()
    assert status == "0"
    enabled, frozen = collector.split()
    assert enabled == "True"
    # The command line's modules: over 100,000 objects; a bare interpreter has about 5,000.
    assert int(frozen) > 60_000, frozen

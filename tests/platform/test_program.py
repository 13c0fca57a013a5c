"""Both ways of starting the service enter through ``pin_sessions.program``, which imports
with the garbage collector off, freezes what it imported and leaves the collector on.

A fresh interpreter: this one has imported everything already.
"""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import entry_points

ENTRY = (
    "import gc, sys\n"
    "sys.argv = ['pin-sessions', '--help']\n"
    "from pin_sessions.program import main\n"
    "try:\n"
    "    main()\n"
    "except SystemExit:\n"
    "    pass\n"
    "print(gc.isenabled(), gc.get_freeze_count())\n"
)


def test_the_command_and_python_m_share_one_entry() -> None:
    (script,) = entry_points(group="console_scripts", name="pin-sessions")
    assert script.value == "pin_sessions.program:main"
    done = subprocess.run(
        [sys.executable, "-m", "pin_sessions", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and "usage: pin-sessions" in done.stdout


def test_the_entry_freezes_its_imports_and_leaves_the_collector_on() -> None:
    done = subprocess.run(
        [sys.executable, "-c", ENTRY], capture_output=True, text=True, check=True, timeout=60
    )
    enabled, frozen = done.stdout.splitlines()[-1].split()
    assert enabled == "True"
    # The command line's modules: over 100,000 objects; a bare interpreter has about 5,000.
    assert int(frozen) > 60_000, frozen

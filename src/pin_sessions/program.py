"""The entry of every process: ``pin-sessions`` and ``python -m pin_sessions``."""

from __future__ import annotations

import gc


def main() -> int:
    """Import the command line with the garbage collector off, then run it.

    A start imports about 800 modules (FastAPI, pydantic, asyncpg, OpenTelemetry): objects
    that live as long as the process, which the collector walked again and again as they
    were made, a tenth of a start's CPU. Frozen, later full collections pass them by too.
    """
    gc.disable()
    try:
        from pin_sessions.cli import main as run_command
    finally:
        gc.freeze()
        gc.enable()
    return run_command()

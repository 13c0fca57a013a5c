"""The public URL a running ``up`` serves, kept in its data directory while it runs.

``up`` may listen on any port (``--port``, ``make up PORT=…``, port 0), and an unset
``PIN_PUBLIC_URL`` follows the port it bound: that URL is every token's issuer. A command
run beside it on the same ``PIN_DATA_DIR`` (``token m2m``) has none of ``up``'s flags, so
without this file it would name ``127.0.0.1:8000`` as its tokens' issuer, and the running
server would refuse them. ``up`` writes the file once it has bound its port and removes it
when it stops; the file names the process, so one left by an ``up`` killed with SIGKILL is
ignored.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path

import psutil

SERVED_URL_FILE = "public-url.json"


@contextlib.contextmanager
def serving_public_url(data_dir: Path, url: str) -> Iterator[None]:
    """While the block runs, ``data_dir`` says that this process serves ``url``."""
    path = data_dir / SERVED_URL_FILE
    written = path.with_name(f".{SERVED_URL_FILE}.{os.getpid()}")
    written.write_text(json.dumps({"url": url, "pid": os.getpid()}))
    # Renamed into place, so a reader never sees half a file.
    written.replace(path)
    try:
        yield
    finally:
        path.unlink(missing_ok=True)


def served_public_url(data_dir: Path) -> str | None:
    """The URL a running ``up`` on ``data_dir`` serves; None when no ``up`` runs there."""
    try:
        served = json.loads((data_dir / SERVED_URL_FILE).read_text())
    except (FileNotFoundError, NotADirectoryError, json.JSONDecodeError):
        return None
    if not isinstance(served, dict):
        return None
    url, pid = served.get("url"), served.get("pid")
    if not isinstance(url, str) or not isinstance(pid, int) or not psutil.pid_exists(pid):
        return None
    return url

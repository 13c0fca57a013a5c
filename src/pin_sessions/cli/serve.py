"""``pin-sessions serve [--host] [--port] [--workers N]``: the HTTP API only.

It listens on ``--host``/``--port`` when given, else on ``PIN_HTTP__HOST``/``PIN_HTTP__PORT``
(127.0.0.1:8000): the flag wins for this process. The socket is bound before the API is
built, so an unset ``PIN_PUBLIC_URL`` follows the address really bound, port 0 included:
the tokens' ``iss``, the OAuth metadata's URLs and the banner all name it.

With ``--workers N`` this process binds the port once and supervises N worker
processes that each serve it as a single ``serve`` would, under uvicorn's own supervisor
(``platform/api_workers.py``; ``cli/api.py`` builds what serves),
with one ``/metrics`` for them all: prometheus-client's multiprocess mode, its files in
a directory made for this run and removed after it.

Metrics are served on ``--metrics-port`` or ``PIN_METRICS_PORT`` when one is given, as by
every role — under ``--workers N`` by this supervising process, merged — and outside prod
also on the API port. In prod the API port never shows them: without a metrics
port the API serves no metrics at all, and says so at start.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
from typing import TYPE_CHECKING

import structlog

from pin_sessions.bootstrap.database import build_runtime, database_endpoint
from pin_sessions.cli.common import (
    add_command,
    add_metrics_port,
    metrics_endpoint,
    metrics_port,
    print_banner,
)
from pin_sessions.platform.listening import bound_port, listen_socket
from pin_sessions.platform.process import run_process
from pin_sessions.platform.tracing import process_tracing
from pin_sessions.settings import is_wildcard_host, listening_url

if TYPE_CHECKING:
    from pin_sessions.cli.common import Commands
    from pin_sessions.settings import Settings

log = structlog.get_logger("pin_sessions.cli")


def add_parsers(commands: Commands) -> None:
    serve = add_command(commands, "serve", "the HTTP API only")
    add_address_arguments(serve)
    serve.add_argument(
        "--workers",
        type=int,
        default=1,
        metavar="N",
        help="N processes serving one port, a dead one replaced; default 1",
    )
    add_metrics_port(serve)
    serve.set_defaults(run=run)


def add_address_arguments(parser: argparse.ArgumentParser) -> None:
    """``--host`` and ``--port``: unset, the settings decide (``PIN_HTTP__HOST``/``__PORT``)."""
    parser.add_argument(
        "--host", default=None, help="the address to listen on; default: PIN_HTTP__HOST (127.0.0.1)"
    )
    parser.add_argument(
        "--port",
        type=_port,
        default=None,
        help="the port to listen on; default: PIN_HTTP__PORT (8000); 0: any free port",
    )


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port (0-65535)")
    return port


def bind_api(settings: Settings, args: argparse.Namespace) -> tuple[Settings, socket.socket]:
    """Listen where the flags (else the settings) say; the settings as that address makes them.

    A ``--host``/``--port`` flag wins over ``PIN_HTTP__HOST``/``__PORT``. The returned settings
    carry the address bound, so everything built from them — the token issuer and the
    OAuth metadata when ``PIN_PUBLIC_URL`` is unset, the banner — names the real port.
    """
    host: str = settings.http.host if args.host is None else args.host
    port: int = settings.http.port if args.port is None else args.port
    sock = listen_socket(host, port)
    bound = settings.listening_on(host, bound_port(sock))
    if bound.public_url is None and is_wildcard_host(host):
        log.warning(
            "PIN_PUBLIC_URL is unset: tokens name this machine's loopback address as their "
            "issuer, which other machines cannot reach; set PIN_PUBLIC_URL",
            issuer=bound.effective_public_url,
        )
    return bound, sock


def stop_grace_seconds(settings: Settings) -> float:
    """How long a stop may take: the shutdown delay, the drain, and a second to close."""
    http = settings.http
    return (http.shutdown_delay + http.shutdown_timeout).total_seconds() + 1.0


def run(settings: Settings, args: argparse.Namespace) -> int:
    settings.check_api_can_sign_in()
    metrics_port = api_metrics_port(settings, args)
    settings, sock = bind_api(settings, args)
    # The API's stack is imported by the two commands that serve it, this one and `up`:
    # every role's process starts through this package, and a job or a consumer that
    # imported FastAPI, uvicorn and httpx too spent 0.23 s of CPU on them at each start.
    from pin_sessions.cli import api

    with contextlib.closing(sock), database_endpoint(settings) as dsn:
        if args.workers > 1:
            return api.serve_workers(
                settings, dsn, sock, args.workers, metrics_port, console=args.console
            )
        with process_tracing("api", os.environ):
            runtime = build_runtime(settings, dsn)
            role = api.api_role(
                runtime,
                sock,
                on_listening=(
                    (lambda _port: print_banner("PIN Sessions API", api_urls(settings)))
                    if args.console
                    else None
                ),
            )
            with metrics_endpoint(metrics_port, runtime.registry):
                run_process(api.serve_api(role, settings))
    return 0


def api_metrics_port(settings: Settings, args: argparse.Namespace) -> int | None:
    """The API's metrics port; in prod, where the API port shows none, a missing one is said."""
    port = metrics_port(settings, args)
    if port is None and not settings.serves_metrics_on_api_port:
        log.warning(
            "no metrics are served: PIN_METRICS_PORT is unset, and in prod the API port "
            "has no /metrics"
        )
    return port


def api_urls(settings: Settings) -> dict[str, str]:
    """Every page a newcomer may open, in the order they will want them, on the address the
    API listens on (``settings`` as :func:`bind_api` returned them)."""
    base = listening_url(settings.http.host, settings.http.port)
    urls = {"API": base}
    if settings.serves_docs:
        urls["Docs"] = f"{base}/docs"
    urls |= {"Demo": f"{base}/demo", "Dashboard": f"{base}/dev-stats"}
    if settings.serves_metrics_on_api_port:
        urls["Metrics"] = f"{base}/metrics"
    return urls

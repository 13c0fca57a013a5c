"""The API's listening socket, bound by the command before the API is built; apart from
:mod:`serving` (uvicorn's server) so that every command can name :class:`CannotListen`
without importing the HTTP stack."""

from __future__ import annotations

import socket

# As uvicorn's own listener, and as `serve --workers` has always bound its socket.
LISTEN_BACKLOG = 2048


class CannotListen(RuntimeError):
    """The API's address cannot be bound (taken, not this machine's, not permitted)."""


def listen_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (port 0: any free port), bound before the app
    is built, so the app knows the address it is reached at (SPEC §11: an unset
    ``PIN_PUBLIC_URL`` follows it). The address family follows the host (IPv4 or IPv6)."""
    try:
        family, _, _, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except OSError as exc:
        raise CannotListen(f"cannot listen on {host}:{port}: {exc}") from exc
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(LISTEN_BACKLOG)
    except OSError as exc:
        sock.close()
        raise CannotListen(
            f"cannot listen on {host}:{port}: {exc.strerror or exc}; "
            "choose another with --port or PIN_HTTP__PORT"
        ) from exc
    return sock


def bound_port(sock: socket.socket) -> int:
    port: int = sock.getsockname()[1]
    return port

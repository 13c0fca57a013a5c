"""The client's IP address: the connection's peer, or what trusted proxies forwarded.

Both contexts store it (SICR, refresh sessions, user-activity sessions), so both read it
the same way: ``X-Forwarded-For`` is believed only from peers in ``PIN_TRUSTED_PROXIES``.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence

from starlette.requests import Request

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def client_ip(
    peer: str | None, forwarded_for: Sequence[str], trusted_proxies: Iterable[Network]
) -> str | None:
    """The client's address: the peer, unless the peer is a trusted proxy.

    ``X-Forwarded-For`` is read right to left, skipping trusted proxies; the first
    untrusted hop is the client. Anything unparsable stops the walk, so a client can
    never choose its own address by writing the header.
    """
    networks = tuple(trusted_proxies)
    if peer is None or not _is_trusted(peer, networks):
        return peer
    current = peer
    for hop in reversed([part.strip() for value in forwarded_for for part in value.split(",")]):
        if not _is_address(hop):
            break
        current = hop
        if not _is_trusted(hop, networks):
            break
    return current


def request_client_ip(request: Request, trusted_proxies: Iterable[Network]) -> str | None:
    """:func:`client_ip` of an HTTP request."""
    peer = request.client.host if request.client else None
    return client_ip(peer, request.headers.getlist("x-forwarded-for"), trusted_proxies)


def _is_address(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def _is_trusted(address: str, networks: tuple[Network, ...]) -> bool:
    try:
        parsed = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(parsed in network for network in networks)

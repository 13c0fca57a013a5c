"""Which address is the client's: X-Forwarded-For only from trusted proxies."""

from __future__ import annotations

from ipaddress import ip_network

from pin_sessions.platform.http.client_address import client_ip

PROXIES = (ip_network("10.0.0.0/8"),)


def test_forwarded_for_is_ignored_from_an_untrusted_peer() -> None:
    assert client_ip("203.0.113.7", ["198.51.100.1"], PROXIES) == "203.0.113.7"


def test_forwarded_for_is_honoured_from_a_trusted_proxy() -> None:
    assert client_ip("10.0.0.5", ["198.51.100.1"], PROXIES) == "198.51.100.1"


def test_the_first_untrusted_hop_from_the_right_is_the_client() -> None:
    # The client forged the leftmost entry; only hops added by our proxies are believed.
    forwarded = ["1.2.3.4, 198.51.100.1, 10.0.0.9"]
    assert client_ip("10.0.0.5", forwarded, PROXIES) == "198.51.100.1"


def test_a_garbage_hop_stops_the_walk_at_the_last_trusted_address() -> None:
    assert client_ip("10.0.0.5", ["not-an-ip"], PROXIES) == "10.0.0.5"

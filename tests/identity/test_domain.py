"""Identity's rules without I/O: codes, tokens, refusals, refresh verdicts, devices."""

from __future__ import annotations

import hashlib
import uuid
from datetime import timedelta

import pytest

from pin_sessions.identity import devices, domain
from pin_sessions.identity.domain import (
    ConfirmationState,
    ConfirmationStatus,
    RefreshVerdict,
    SessionState,
    SessionStatus,
)
from pin_sessions.identity.errors import (
    ConfirmationAlreadyUsed,
    ConfirmationAttemptsExceeded,
    ConfirmationExpired,
    SessionExpired,
    SessionRevoked,
)
from pin_sessions.platform.devices import truncate_user_agent
from tests.conftest import T0
from tests.identity.flows import DESKTOP_UA, IPHONE_UA

KEY = b"k" * 32
INTERVAL = timedelta(seconds=10)


def test_codes_are_six_digits() -> None:
    codes = {domain.new_code() for _ in range(200)}
    assert all(len(code) == 6 and code.isdigit() for code in codes)
    assert len(codes) > 150


def test_a_code_hash_is_bound_to_its_request_and_key() -> None:
    first, second = uuid.uuid4(), uuid.uuid4()
    assert domain.code_hash(KEY, first, "123456") == domain.code_hash(KEY, first, "123456")
    assert domain.code_hash(KEY, first, "123456") != domain.code_hash(KEY, second, "123456")
    assert domain.code_hash(KEY, first, "123456") != domain.code_hash(b"x" * 32, first, "123456")


def test_the_successor_token_is_derived_from_the_parent_under_the_key() -> None:
    parent = domain.new_refresh_token()
    assert len(parent) == 43  # 32 bytes, base64url without padding
    successor = domain.successor_token(KEY, parent)
    assert successor == domain.successor_token(KEY, parent)
    assert successor not in (parent, domain.successor_token(b"x" * 32, parent))
    assert domain.token_hash(successor) == hashlib.sha256(successor.encode()).digest()


@pytest.mark.parametrize(
    ("status", "expires_in", "error"),
    [
        (ConfirmationStatus.PENDING, timedelta(0), ConfirmationExpired),
        (ConfirmationStatus.CONFIRMED, timedelta(0), ConfirmationExpired),
        (ConfirmationStatus.EXPIRED, timedelta(minutes=1), ConfirmationExpired),
        (ConfirmationStatus.CONFIRMED, timedelta(minutes=1), ConfirmationAlreadyUsed),
        (ConfirmationStatus.PENDING, timedelta(minutes=1), ConfirmationAttemptsExceeded),
    ],
)
def test_expiry_is_judged_first_whatever_the_status(
    status: ConfirmationStatus, expires_in: timedelta, error: type[Exception]
) -> None:
    state = ConfirmationState(status, T0 + expires_in, attempts=5)
    assert isinstance(domain.confirmation_refusal(state, T0), error)


LIMITS = domain.SignInLimits.of(per_ip_limit=20, global_limit=600)


def test_a_phone_may_ask_again_when_the_fifth_newest_request_leaves_the_window() -> None:
    assert domain.sign_in_request_refusal(domain.LimitEdges(None, None, None), LIMITS, T0) is None
    fifth = T0 - timedelta(minutes=10, microseconds=1)
    refusal = domain.sign_in_request_refusal(domain.LimitEdges(fifth, None, None), LIMITS, T0)
    # Out of the 15-minute window 5 min minus 1 µs from now: a client waits whole seconds.
    assert refusal is not None and refusal.retry_after == 300
    assert "phone" in refusal.detail


def test_when_several_limits_are_reached_the_client_waits_for_the_last_to_free() -> None:
    edges = domain.LimitEdges(
        phone=T0 - timedelta(minutes=14),  # frees in 1 min
        address=T0 - timedelta(minutes=20),  # frees in 40 min
        service=T0 - timedelta(seconds=30),  # frees in 30 s
    )
    refusal = domain.sign_in_request_refusal(edges, LIMITS, T0)
    assert refusal is not None and refusal.retry_after == 40 * 60
    assert "address" in refusal.detail


@pytest.mark.parametrize(
    ("ip", "network"),
    [
        (None, None),
        ("203.0.113.7", "203.0.113.7"),
        ("::ffff:203.0.113.7", "203.0.113.7"),
        ("2001:db8:1:2:aaaa::1", "2001:db8:1:2::/64"),
        ("2001:db8:1:2:ffff:ffff:ffff:ffff", "2001:db8:1:2::/64"),
        ("testclient", None),
    ],
)
def test_the_per_address_limit_counts_an_ipv6_client_by_its_64(
    ip: str | None, network: str | None
) -> None:
    assert domain.ip_network(ip) == network


def test_spent_attempts_refuse_until_the_request_expires() -> None:
    state = ConfirmationState(ConfirmationStatus.PENDING, T0 + timedelta(seconds=90.2), 5)
    refusal = domain.confirmation_refusal(state, T0)
    assert isinstance(refusal, ConfirmationAttemptsExceeded)
    assert refusal.retry_after == 91


def _session(status: SessionStatus, *, rotated_ago: timedelta | None = None) -> SessionState:
    return SessionState(
        id=uuid.uuid4(),
        user_id=uuid.uuid4(),
        family_id=uuid.uuid4(),
        status=status,
        expires_at=T0 + timedelta(days=1),
        rotated_at=None if rotated_ago is None else T0 - rotated_ago,
        replaced_by=None if rotated_ago is None else uuid.uuid4(),
        signed_in_at=T0 - timedelta(days=1),
    )


def test_a_rotated_token_is_a_replay_within_the_interval_and_reuse_after_it() -> None:
    assert (
        domain.refresh_verdict(_session(SessionStatus.ROTATED, rotated_ago=INTERVAL), T0, INTERVAL)
        is RefreshVerdict.REPLAY
    )
    assert (
        domain.refresh_verdict(
            _session(SessionStatus.ROTATED, rotated_ago=INTERVAL + timedelta(microseconds=1)),
            T0,
            INTERVAL,
        )
        is RefreshVerdict.REUSE
    )


def test_a_revoked_or_expired_session_is_refused_with_its_own_error() -> None:
    with pytest.raises(SessionRevoked):
        domain.refresh_verdict(_session(SessionStatus.REVOKED), T0, INTERVAL)
    with pytest.raises(SessionExpired):
        domain.refresh_verdict(_session(SessionStatus.EXPIRED), T0, INTERVAL)
    # Active but past expiry, the job not having run yet: expired all the same.
    with pytest.raises(SessionExpired):
        domain.refresh_verdict(_session(SessionStatus.ACTIVE), T0 + timedelta(days=1), INTERVAL)


def test_a_user_agent_longer_than_the_column_is_truncated() -> None:
    assert len(truncate_user_agent("a" * 5000)) == 1024
    assert truncate_user_agent(None) == ""


@pytest.mark.parametrize(
    ("user_agent", "expected"),
    [
        (IPHONE_UA, ("Mobile", "iOS 17", "Mobile Safari 17")),
        (DESKTOP_UA, ("Desktop", "Windows 10", "Chrome 120")),
        (
            "Mozilla/5.0 (iPad; CPU OS 16_0 like Mac OS X) AppleWebKit/605.1.15 "
            "(KHTML, like Gecko) Version/16.0 Mobile/15E148 Safari/604.1",
            ("Tablet", "iOS 16", "Mobile Safari 16"),
        ),
        ("Googlebot/2.1 (+http://www.google.com/bot.html)", ("Bot", None, "Googlebot 2")),
        ("", ("Unknown", None, None)),
    ],
)
def test_the_device_is_described_by_ua_parser(
    user_agent: str, expected: tuple[str, str | None, str | None]
) -> None:
    described = devices.describe(user_agent)
    assert (described.type, described.os, described.browser) == expected


def test_an_address_too_long_for_the_ip_columns_is_not_stored() -> None:
    assert domain.storable_ip("2001:db8::1") == "2001:db8::1"
    assert domain.storable_ip("fe80::1%" + "x" * 40) is None
    assert domain.storable_ip(None) is None

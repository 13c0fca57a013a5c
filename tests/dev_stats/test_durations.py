"""The duration histogram behind p50/p90: its buckets and the promise the summary makes.

The promise (README, ``dev_stats.durations``): a percentile differs from PostgreSQL's exact
``percentile_cont`` by at most 1/65 of it, and not at all when the durations it interpolates
are under 64 s. The reference here is ``percentile_cont``'s own rule on the sorted durations;
``test_daily_rollups`` checks the same promise against PostgreSQL itself.
"""

from __future__ import annotations

import math
import struct
from itertools import zip_longest

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pin_sessions.dev_stats import durations
from pin_sessions.dev_stats.durations import (
    BUCKETS,
    EXACT_BELOW,
    MAX_DURATION_SECONDS,
    MAX_RELATIVE_ERROR,
    bucket_bounds,
    bucket_of,
    bucket_value,
)

# Float rounding in the interpolation, far below the promise.
ROUNDING = 1e-9


def percentile_cont(values: list[int], fraction: float) -> float:
    """PostgreSQL's percentile_cont over ``values`` (orderedsetaggs.c)."""
    ordered = sorted(values)
    position = fraction * (len(ordered) - 1)
    first_row, second_row = math.floor(position), math.ceil(position)
    first, second = float(ordered[first_row]), float(ordered[second_row])
    return first + (position - first_row) * (second - first)


def histogram_of(values: list[int]) -> list[int]:
    counts = [0] * BUCKETS
    for value in values:
        counts[bucket_of(value)] += 1
    return counts


def within_promise(estimate: float | None, exact: float) -> bool:
    assert estimate is not None
    return abs(estimate - exact) <= MAX_RELATIVE_ERROR * exact + ROUNDING


seconds = st.integers(min_value=0, max_value=MAX_DURATION_SECONDS)
# Durations at every scale: most sessions last minutes, a few seconds or days.
scaled_seconds = st.integers(min_value=0, max_value=31).flatmap(
    lambda bits: st.integers(min_value=0, max_value=(1 << bits) - 1)
)
fractions = st.one_of(st.sampled_from([0.5, 0.9]), st.floats(min_value=0, max_value=1))


@given(seconds)
def test_every_duration_falls_in_a_bucket_that_holds_it(value: int) -> None:
    low, high = bucket_bounds(bucket_of(value))
    assert low <= value <= high


@pytest.mark.parametrize(
    "value",
    [0, 1, 63, 64, 65, 127, 128, 129, 2**20 - 1, 2**20, 2**30, MAX_DURATION_SECONDS],
)
def test_bucket_edges_hold_their_durations(value: int) -> None:
    low, high = bucket_bounds(bucket_of(value))
    assert low <= value <= high


def test_the_buckets_cover_every_int4_duration_once_in_order() -> None:
    assert bucket_bounds(0) == (0, 0)
    for bucket in range(BUCKETS - 1):
        assert bucket_bounds(bucket)[1] + 1 == bucket_bounds(bucket + 1)[0], bucket
    assert bucket_bounds(BUCKETS - 1)[1] == MAX_DURATION_SECONDS
    assert bucket_of(MAX_DURATION_SECONDS) == BUCKETS - 1


def test_every_bucket_value_is_within_the_promise_of_each_second_it_holds() -> None:
    for bucket in range(BUCKETS):
        low, high = bucket_bounds(bucket)
        value = bucket_value(bucket)
        # The relative error is largest at the bucket's ends.
        for second in (low, high):
            assert abs(value - second) <= MAX_RELATIVE_ERROR * second, (bucket, second)


def test_durations_under_64_seconds_are_their_own_buckets() -> None:
    assert EXACT_BELOW == 64
    assert all(bucket_value(bucket_of(value)) == value for value in range(EXACT_BELOW))


@pytest.mark.parametrize("value", [-1, MAX_DURATION_SECONDS + 1])
def test_a_duration_outside_int4_has_no_bucket(value: int) -> None:
    with pytest.raises(ValueError, match="a duration lies in"):
        bucket_of(value)


@given(st.lists(scaled_seconds, min_size=1, max_size=200), fractions)
def test_a_percentile_is_within_1_65th_of_percentile_cont(
    values: list[int], fraction: float
) -> None:
    estimate = durations.percentile(histogram_of(values), fraction)
    assert within_promise(estimate, percentile_cont(values, fraction))


@given(
    st.lists(st.integers(min_value=0, max_value=EXACT_BELOW - 1), min_size=1, max_size=200),
    fractions,
)
def test_a_percentile_of_durations_under_64_seconds_is_exact(
    values: list[int], fraction: float
) -> None:
    assert durations.percentile(histogram_of(values), fraction) == percentile_cont(values, fraction)


@given(st.lists(st.lists(scaled_seconds, max_size=30), min_size=1, max_size=10))
def test_merged_days_give_the_percentiles_of_all_their_sessions(days: list[list[int]]) -> None:
    everything = [value for day in days for value in day]
    merged = durations.merge_stored([_stored(day) for day in days], len(everything))
    assert sum(merged) == len(everything)
    for fraction in (0.5, 0.9):
        if everything:
            assert within_promise(
                durations.percentile(merged, fraction), percentile_cont(everything, fraction)
            )
        else:
            assert durations.percentile(merged, fraction) is None


@given(st.lists(st.lists(st.integers(0, 2**31 - 1), max_size=40), min_size=1, max_size=6))
def test_merging_stored_days_adds_their_counts_bucket_by_bucket(counts: list[list[int]]) -> None:
    stored = [struct.pack(f">{len(day)}i", *day) for day in counts]
    expected = [sum(bucket) for bucket in zip_longest(*counts, fillvalue=0)]
    total = sum(expected)
    # Below 2**32 sessions the days are added as big integers; from there on one by one.
    assert list(durations.merge_stored(stored, total)) == expected


def test_buckets_past_2_to_the_32_sessions_do_not_carry_into_their_neighbours() -> None:
    days = [struct.pack(">3i", 7, 2**31 - 1, 5)] * 3
    merged = durations.merge_stored(days, 3 * (7 + 2**31 - 1 + 5))
    assert list(merged) == [21, 3 * (2**31 - 1), 15]


def test_no_sessions_have_no_percentile() -> None:
    assert durations.percentile([], 0.5) is None
    assert durations.percentile([0, 0, 0], 0.9) is None


def _stored(durations_of_a_day: list[int]) -> bytes:
    """A day's histogram as its rollup row holds it: up to its last non-empty bucket."""
    counts = histogram_of(durations_of_a_day)
    last = max((bucket for bucket, count in enumerate(counts) if count), default=-1)
    return struct.pack(f">{last + 1}i", *counts[: last + 1])

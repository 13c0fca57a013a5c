"""Session durations as a fixed histogram: the scheme behind the summary's p50 and p90.

The summary reads one row per day, not every fact, so its percentiles come from per-day
counts of sessions by duration bucket, merged over the period. Rules and the histogram's
stored form only, no I/O.

Buckets (log-linear, as HDR histograms cut them). Below ``EXACT_BELOW`` (64) seconds each
whole second is its own bucket. From there on every power-of-two range ``[2**e, 2**(e+1))``
is cut into ``SUB_BUCKETS`` (32) equal buckets. ``BUCKETS`` (864) buckets cover every
duration an ``int4`` holds; the rule is integer arithmetic, so the migration that built the
first rows from the facts computes the same bucket in SQL.

What the API promises. A bucket ``[lo, hi]`` stands for ``2·lo·hi / (lo + hi)``, the value
whose worst relative error over the whole seconds it holds is least: at most
``(hi - lo) / (hi + lo)``, which is below ``1/65`` for every bucket (``MAX_RELATIVE_ERROR``)
and 0 below 64 s. A percentile is computed as PostgreSQL's ``percentile_cont`` computes it —
the order statistics at ⌊q·(n-1)⌋ and the next, interpolated linearly — with each order
statistic replaced by its bucket's value. Durations are never negative, so interpolating
two values that are each within 1/65 of the truth stays within 1/65 of the interpolated
truth: ``|p̂ - p| ≤ p / 65`` (1.54 %), and ``p̂ = p`` when the two order statistics are
under 64 s.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from itertools import zip_longest

SUB_BUCKET_BITS = 5
SUB_BUCKETS = 1 << SUB_BUCKET_BITS
EXACT_BELOW = 2 * SUB_BUCKETS
# The largest int4 has 31 significant bits: shifts 0 … 31 - (SUB_BUCKET_BITS + 1).
BUCKETS = (32 - SUB_BUCKET_BITS) * SUB_BUCKETS
MAX_DURATION_SECONDS = 2**31 - 1
# Bucket width w at lower bound lo ≥ 32·w: (w - 1) / (2·lo + w - 1) < w / (65·w) = 1/65.
MAX_RELATIVE_ERROR = 1 / (2 * SUB_BUCKETS + 1)


def bucket_of(seconds: int) -> int:
    """The bucket of a duration of ``seconds`` (0 … ``MAX_DURATION_SECONDS``)."""
    if not 0 <= seconds <= MAX_DURATION_SECONDS:
        raise ValueError(f"a duration lies in 0 … {MAX_DURATION_SECONDS} s, not {seconds}")
    shift = max(seconds.bit_length() - SUB_BUCKET_BITS - 1, 0)
    return shift * SUB_BUCKETS + (seconds >> shift)


def bucket_bounds(bucket: int) -> tuple[int, int]:
    """The first and last whole second of ``bucket``, both included."""
    if not 0 <= bucket < BUCKETS:
        raise ValueError(f"a bucket lies in 0 … {BUCKETS - 1}, not {bucket}")
    if bucket < EXACT_BELOW:
        return bucket, bucket
    shift = bucket // SUB_BUCKETS - 1
    low = (bucket - shift * SUB_BUCKETS) << shift
    return low, low + (1 << shift) - 1


def bucket_value(bucket: int) -> float:
    """The value ``bucket`` stands for: least worst-case relative error over its seconds."""
    low, high = bucket_bounds(bucket)
    if low == high:
        return float(low)
    return 2 * low * high / (low + high)


def merge_stored(days: Sequence[bytes], sessions: int) -> Sequence[int]:
    """Sessions per bucket over several days' histograms, as the rollup rows store them.

    A day's histogram is its counts as 4-byte big-endian integers, bucket b at bytes 4b to
    4b + 3, up to its last non-empty bucket (migration 0010); ``sessions`` is how many
    sessions the days count together.
    """
    width = max(map(len, days), default=0)
    if sessions < 1 << 32:
        # Padded to one width, a day's bytes read as one big-endian integer are the sum of
        # count_b * 2**(32 * (last - b)): adding those integers adds every bucket at once, in
        # C, and no bucket carries into the next while its total, at most ``sessions``, stays
        # below 2**32 (BENCHMARKS.md: a year's merge in a few milliseconds less).
        total = sum(int.from_bytes(day.ljust(width, b"\0"), "big") for day in days)
        return struct.unpack(f">{width // 4}I", total.to_bytes(width, "big"))
    counts = (struct.unpack(f">{len(day) // 4}I", day) for day in days)
    return [sum(bucket) for bucket in zip_longest(*counts, fillvalue=0)]


def percentile(histogram: Sequence[int], fraction: float) -> float | None:
    """``percentile_cont(fraction)`` of the durations counted, each read as its bucket's value.

    None when nothing is counted, as ``percentile_cont`` over no rows.
    """
    total = sum(histogram)
    if total == 0:
        return None
    # PostgreSQL's percentile_cont: rows first_row and first_row + 1 (0-based), interpolated.
    position = fraction * (total - 1)
    first_row = int(position)
    proportion = position - first_row
    first = _value_at_rank(histogram, first_row)
    if proportion == 0:
        return first
    second = _value_at_rank(histogram, first_row + 1)
    return first + proportion * (second - first)


def _value_at_rank(histogram: Sequence[int], rank: int) -> float:
    """The value of the 0-based ``rank``-th smallest duration counted."""
    seen = 0
    for bucket, count in enumerate(histogram):
        seen += count
        if rank < seen:
            return bucket_value(bucket)
    raise ValueError(f"rank {rank} is beyond the {seen} durations counted")

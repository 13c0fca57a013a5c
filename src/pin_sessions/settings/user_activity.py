"""User-activity's groups: the heartbeat writer, its jobs (activity-closer, activity-retention)."""

from __future__ import annotations

from datetime import timedelta

from pin_sessions.settings.base import (
    BatchSize,
    Group,
    JobSettings,
    NonNegativeDuration,
    PositiveDuration,
)


class HeartbeatSettings(Group):
    # How long the group-committed UPDATE waits after each batch for the heartbeats right
    # behind it; 0: none. At a steady 3,000/s on one process, 2 ms took the API's CPU per
    # heartbeat from 232 to 151 µs and PostgreSQL's from 108 to 54 µs, for 2 ms more at the
    # median (BENCHMARKS.md, "A linger for the group commit"). A device alone waits nothing.
    linger: NonNegativeDuration = timedelta(milliseconds=2)


class ActivityCloserSettings(JobSettings):
    inactivity_threshold: PositiveDuration = timedelta(minutes=15)
    polling_interval: PositiveDuration = timedelta(seconds=60)
    batch_size: BatchSize = 500
    max_run_duration: PositiveDuration = timedelta(minutes=2)


class ActivityRetentionSettings(JobSettings):
    # The seed's cadence: once a day.
    polling_interval: PositiveDuration = timedelta(days=1)
    batch_size: BatchSize = 1000
    max_run_duration: PositiveDuration = timedelta(minutes=10)
    age: PositiveDuration = timedelta(days=365)

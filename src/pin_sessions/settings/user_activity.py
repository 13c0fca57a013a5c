"""User-activity's groups: its jobs (activity-closer, activity-retention)."""

from __future__ import annotations

from datetime import timedelta

from pin_sessions.settings.base import BatchSize, JobSettings, PositiveDuration


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

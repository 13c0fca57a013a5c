"""User-activity background jobs: ActivityCloserJob and ActivityRetentionJob."""

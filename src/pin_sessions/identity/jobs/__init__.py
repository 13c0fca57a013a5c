"""Identity background jobs: ExpireSessionsJob and SessionRetentionJob."""

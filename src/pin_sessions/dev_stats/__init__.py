"""dev-stats: session metrics read model fed by the session-ended event."""

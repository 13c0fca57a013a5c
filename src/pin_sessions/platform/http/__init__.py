"""The HTTP shell shared by every context: app factory, problem+json, request context."""

"""identity's ``queries.sql``, loaded and compiled once for the whole package."""

from __future__ import annotations

from pin_sessions.platform.queries import load_queries

QUERIES = load_queries("pin_sessions.identity")

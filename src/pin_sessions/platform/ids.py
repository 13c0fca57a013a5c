"""Identifier generation: time-sortable UUIDv7 for new rows."""

from __future__ import annotations

import uuid

import uuid6


def new_id() -> uuid.UUID:
    """A UUIDv7: unique and sortable by creation time, so btree inserts stay append-only."""
    return uuid.UUID(int=uuid6.uuid7().int)

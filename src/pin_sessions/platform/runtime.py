"""What every role of the process shares once the composition root has built it."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry

from pin_sessions.platform.clock import Clock
from pin_sessions.platform.database import Database
from pin_sessions.platform.secrets import ServerSecrets
from pin_sessions.settings import Settings


@dataclass(frozen=True)
class Runtime:
    settings: Settings
    database: Database
    clock: Clock
    registry: CollectorRegistry
    secrets: ServerSecrets

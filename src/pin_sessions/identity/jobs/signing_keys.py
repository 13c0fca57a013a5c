"""SigningKeysJob: the signing keys' rotation without downtime (SPEC §8).

One phase, ``rotate``, in one transaction under the keys' advisory lock (the one ``keys
rotate`` and a first signer take), deciding with the run's ``now``
(:func:`pin_sessions.identity.keys.rotation_plan`):

* a new database gets a Current key at once;
* a Current key older than ``PIN_SIGNING_KEYS__ROTATE_AFTER`` (30 d) gets a Next key,
  published in the JWKS from that moment;
* a Next key published for ``PIN_SIGNING_KEYS__PUBLISH_AHEAD`` (1 h, above the JWKS's
  5-minute cache age) becomes Current, and the Current one Retired — so no verifier meets
  a kid it has not had the chance to fetch;
* a Retired key is deleted once no token it signed can still be valid (the longest
  token lifetime, plus the tolerated clock skew, after it retired).

Two instances at once create one key: the second waits for the lock and then finds the
first one's key; the partial unique indexes of migration 0013 would make a second insert
a no-op all the same.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Gauge

from pin_sessions.identity.keys import (
    AppliedPlan,
    KeyCipher,
    KeyStatus,
    RotationPolicy,
    apply_plan,
    key_rows,
    lock_keys,
    rotation_plan,
)
from pin_sessions.platform.jobs import JobRun, PhaseOutcome
from pin_sessions.settings import SigningKeysSettings

if TYPE_CHECKING:
    import uuid
    from datetime import datetime, timedelta

    from pin_sessions.platform.database import Database


@dataclass(frozen=True)
class SigningKeysMetrics:
    changes: Counter
    errors: Counter
    current_age: Gauge

    @classmethod
    def register(cls, registry: CollectorRegistry) -> SigningKeysMetrics:
        changes = Counter(
            "identity_signing_keys_changes_total",
            "Signing keys created, activated, retired and dropped, by change",
            ["change"],
            registry=registry,
        )
        for change in ("created", "activated", "retired", "dropped"):
            changes.labels(change=change)
        return cls(
            changes=changes,
            errors=Counter(
                "identity_signing_keys_errors_total",
                "Failed rotation phases",
                registry=registry,
            ),
            current_age=Gauge(
                "identity_signing_keys_current_age_seconds",
                "How long the Current signing key has been signing, as of the last run",
                registry=registry,
            ),
        )


@dataclass(kw_only=True)
class RotateOutcome(PhaseOutcome):
    applied: AppliedPlan = field(default_factory=AppliedPlan)

    def counts(self) -> dict[str, int]:
        return {
            "createdCount": len(self.applied.created),
            "activatedCount": len(self.applied.activated),
            "retiredCount": len(self.applied.retired),
            "droppedCount": len(self.applied.dropped),
        }


@dataclass(frozen=True)
class SigningKeysResult:
    job_run_id: uuid.UUID
    rotate: RotateOutcome
    duration_ms: int

    @property
    def succeeded(self) -> bool:
        return not self.rotate.failed

    def to_json(self) -> dict[str, Any]:
        applied = self.rotate.applied
        return {
            "jobRunId": str(self.job_run_id),
            "created": applied.created,
            "activated": applied.activated,
            "retired": applied.retired,
            "dropped": applied.dropped,
            "durationMs": self.duration_ms,
        }


@dataclass
class SigningKeysJob:
    """Creates, activates, retires and drops signing keys as their ages say."""

    database: Database
    options: SigningKeysSettings
    cipher: KeyCipher
    token_lifetime: timedelta
    metrics: SigningKeysMetrics
    name: str = field(default="signing-keys", init=False)
    metric_prefix: str = field(default="identity_signing_keys", init=False)

    async def run_once(self, now: datetime, run: JobRun) -> SigningKeysResult:
        outcome = RotateOutcome(phase="rotate")

        async def rotate() -> None:
            policy = RotationPolicy(
                self.options.rotate_after, self.options.publish_ahead, self.token_lifetime
            )
            async with self.database.transaction() as conn:
                await lock_keys(conn)
                plan = rotation_plan(await key_rows(conn), now, policy)
                outcome.applied = await apply_plan(conn, self.cipher, plan, now)
                current = [key for key in await key_rows(conn) if key.status is KeyStatus.CURRENT]
            for change, kids in vars(outcome.applied).items():
                self.metrics.changes.labels(change=change).inc(len(kids))
            if current and current[0].activated_at is not None:
                self.metrics.current_age.set((now - current[0].activated_at).total_seconds())

        await run.phase(outcome, rotate, errors=self.metrics.errors)
        return SigningKeysResult(run.id, outcome, duration_ms=run.elapsed_ms())


def build_signing_keys_job(
    database: Database,
    options: SigningKeysSettings,
    registry: CollectorRegistry,
    *,
    cipher: KeyCipher,
    token_lifetime: timedelta,
) -> SigningKeysJob:
    return SigningKeysJob(
        database, options, cipher, token_lifetime, SigningKeysMetrics.register(registry)
    )

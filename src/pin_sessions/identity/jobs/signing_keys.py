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

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from pin_sessions.identity.keys import (
    KeyCipher,
    KeyStatus,
    RotationPolicy,
    apply_plan,
    key_rows,
    lock_keys,
    rotation_plan,
)
from pin_sessions.platform.job_spec import Count, JobSpec, Phase, counter, errors, gauge
from pin_sessions.platform.jobs import JobRun, PhaseRun
from pin_sessions.settings import SigningKeysSettings

if TYPE_CHECKING:
    from datetime import datetime, timedelta

    from pin_sessions.platform.database import Database

CHANGES = ("created", "activated", "retired", "dropped")
CURRENT_AGE = "current_age_seconds"

SPEC = JobSpec(
    name="signing-keys",
    metric_prefix="identity_signing_keys",
    metrics=(
        counter(
            "changes_total",
            "Signing keys created, activated, retired and dropped, by change",
            labels=("change",),
            series=tuple((change,) for change in CHANGES),
        ),
        errors("Failed rotation phases"),
        gauge(CURRENT_AGE, "How long the Current signing key has been signing, as of the last run"),
    ),
    phases=(
        Phase(
            "rotate",
            # The result lists each change's key ids; the line and the counter, how many.
            counts=tuple(
                Count(
                    change,
                    change,
                    log=f"{change}Count",
                    counter="changes_total",
                    labels=(change,),
                    listed=True,
                )
                for change in CHANGES
            ),
        ),
    ),
)


@dataclass
class SigningKeysJob:
    """Creates, activates, retires and drops signing keys as their ages say."""

    database: Database
    options: SigningKeysSettings
    cipher: KeyCipher
    token_lifetime: timedelta
    spec: ClassVar[JobSpec] = SPEC

    async def run_once(self, now: datetime, run: JobRun) -> None:
        async def rotate(phase: PhaseRun) -> None:
            policy = RotationPolicy(
                self.options.rotate_after, self.options.publish_ahead, self.token_lifetime
            )
            async with self.database.transaction() as conn:
                await lock_keys(conn)
                plan = rotation_plan(await key_rows(conn), now, policy)
                applied = await apply_plan(conn, self.cipher, plan, now)
                current = [key for key in await key_rows(conn) if key.status is KeyStatus.CURRENT]
            for change, kids in vars(applied).items():
                phase.add_items(change, kids)
            if current and current[0].activated_at is not None:
                age = (now - current[0].activated_at).total_seconds()
                run.metrics.gauge(CURRENT_AGE).set(age)

        await run.phase("rotate", rotate)


def build_signing_keys_job(
    database: Database,
    options: SigningKeysSettings,
    *,
    cipher: KeyCipher,
    token_lifetime: timedelta,
) -> SigningKeysJob:
    return SigningKeysJob(database, options, cipher, token_lifetime)

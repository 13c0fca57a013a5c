"""Signing keys (SPEC §8): their rotation across a token's life, their storage, their loss."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import uuid
from datetime import datetime, timedelta
from typing import Any

import asyncpg
import httpx
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from prometheus_client import CollectorRegistry

from pin_sessions.bootstrap.database import build_runtime, worker_database
from pin_sessions.bootstrap.jobs import JOB_WORKERS
from pin_sessions.identity import repository
from pin_sessions.identity.jobs.signing_keys import SPEC as SIGNING_KEYS
from pin_sessions.identity.keys import (
    KeyCipher,
    KeyDecryptionFailed,
    KeyRow,
    KeyStatus,
    RotationPolicy,
    new_key_pair,
    rotation_plan,
)
from pin_sessions.platform.clock import FixedClock
from pin_sessions.platform.jobs import RunResult
from pin_sessions.platform.key_set import REFRESH_AFTER
from pin_sessions.platform.metrics import new_registry
from pin_sessions.platform.runtime import Runtime
from pin_sessions.platform.secrets import ServerSecrets
from pin_sessions.settings import Settings
from tests.conftest import T0
from tests.identity.flows import bearer, refresh, sign_in
from tests.support.cli import run_cli
from tests.support.processes import pin_sessions
from tests.support.waiting import wait_until

SESSIONS = "/api/identity/sessions"
POLICY = RotationPolicy(
    rotate_after=timedelta(days=30),
    publish_ahead=timedelta(hours=1),
    token_lifetime=timedelta(minutes=15),
)
DAY = timedelta(days=1)


def _key(
    status: KeyStatus, created: int, activated: int | None = None, retired: int | None = None
) -> KeyRow:
    """A key row whose times are minutes after T0."""

    def at(minutes: int | None) -> datetime | None:
        return None if minutes is None else T0 + timedelta(minutes=minutes)

    return KeyRow(
        f"kid-{status}-{created}",
        status,
        T0 + timedelta(minutes=created),
        at(activated),
        at(retired),
    )


def test_a_new_database_gets_a_current_key_at_once() -> None:
    plan = rotation_plan([], T0, POLICY)
    assert (plan.create_current, plan.create_next, plan.promote) == (True, False, None)


def test_a_next_key_is_published_once_the_current_one_is_older_than_rotate_after() -> None:
    current = _key(KeyStatus.CURRENT, 0, activated=0)
    young = rotation_plan([current], T0 + POLICY.rotate_after - timedelta(minutes=1), POLICY)
    old = rotation_plan([current], T0 + POLICY.rotate_after, POLICY)
    assert (young.create_next, old.create_next) == (False, True)


def test_a_next_key_signs_only_after_being_published_for_publish_ahead() -> None:
    keys = [_key(KeyStatus.CURRENT, 0, activated=0), _key(KeyStatus.NEXT, 100)]
    early = rotation_plan(keys, T0 + timedelta(minutes=159), POLICY)
    due = rotation_plan(keys, T0 + timedelta(minutes=160), POLICY)
    assert (early.promote, due.promote) == (None, "kid-Next-100")
    assert not due.create_next and not due.create_current


def test_a_retired_key_is_dropped_only_when_no_token_it_signed_can_be_valid() -> None:
    retired = _key(KeyStatus.RETIRED, 0, activated=0, retired=60)
    last_token_dies = T0 + timedelta(minutes=60) + POLICY.token_lifetime + timedelta(seconds=30)
    kept = rotation_plan([retired], last_token_dies - timedelta(seconds=1), POLICY)
    dropped = rotation_plan([retired], last_token_dies, POLICY)
    assert (kept.drop, dropped.drop) == ([], ["kid-Retired-0"])


def test_private_keys_are_sealed_under_the_secret_key_and_bound_to_their_kid() -> None:
    pair = new_key_pair()
    cipher = KeyCipher(ServerSecrets(b"k" * 40))
    sealed = cipher.seal(pair.kid, pair.private_key)
    plain = pair.private_key.private_bytes(
        serialization.Encoding.DER,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    assert plain not in sealed
    assert cipher.open(pair.kid, sealed).private_numbers() == pair.private_key.private_numbers()
    with pytest.raises(KeyDecryptionFailed):
        KeyCipher(ServerSecrets(b"x" * 40)).open(pair.kid, sealed)
    with pytest.raises(KeyDecryptionFailed):
        cipher.open(new_key_pair().kid, sealed)  # the same ciphertext under another kid


async def _rotate(runtime: Runtime) -> RunResult:
    # A registry of its own: each pass builds the job afresh, as `job --once` does.
    worker = JOB_WORKERS["signing-keys"](dataclasses.replace(runtime, registry=new_registry()))
    result = await worker.run_pass(asyncio.Event())
    assert result is not None and result.succeeded
    assert result.spec is SIGNING_KEYS
    return result


async def _kids(http: httpx.AsyncClient) -> list[str]:
    response = await http.get("/.well-known/jwks.json")
    assert response.status_code == 200
    return [key["kid"] for key in response.json()["keys"]]


async def _published(http: httpx.AsyncClient, clock: FixedClock, kids: list[str]) -> None:
    """The JWKS names ``kids`` once the copy in use has been read again, in the background.

    The clock moves on first: a read begun at this instant, but before the change the
    caller made, would otherwise stay fresh for as long as the test's clock stands still.
    """
    clock.advance(REFRESH_AFTER)

    async def shows() -> bool:
        return await _kids(http) == kids

    await wait_until(shows, timeout=10)


def _kid(tokens: dict[str, Any]) -> str:
    kid: str = jwt.get_unverified_header(tokens["accessToken"])["kid"]
    return kid


async def test_a_token_signed_before_a_rotation_still_verifies_after_it(
    http: httpx.AsyncClient, runtime: Runtime, clock: FixedClock
) -> None:
    first = await sign_in(http)
    [old_kid] = await _kids(http)
    assert _kid(first) == old_kid

    clock.advance(POLICY.rotate_after)
    published = await _rotate(runtime)
    [new_kid] = published.phases["rotate"].items["created"]
    # Published an hour ahead: in the JWKS, not yet signing.
    await _published(http, clock, [old_kid, new_kid])
    signed_in = await sign_in(http)  # the first sign-in's session has expired (30 d)
    assert _kid(signed_in) == old_kid
    clock.advance(POLICY.publish_ahead - timedelta(minutes=5))
    before = (await refresh(http, signed_in["refreshToken"])).json()
    assert _kid(before) == old_kid

    clock.advance(timedelta(minutes=5))
    switched = await _rotate(runtime)
    assert (
        switched.phases["rotate"].items["activated"],
        switched.phases["rotate"].items["retired"],
    ) == (
        [new_kid],
        [old_kid],
    )
    assert (await http.get(SESSIONS, headers=bearer(before))).status_code == 200
    after = (await refresh(http, before["refreshToken"])).json()
    assert _kid(after) == new_kid
    assert await _kids(http) == [old_kid, new_kid]

    # The old key's last token has expired: the key goes, the new one's tokens go on.
    clock.advance(timedelta(minutes=15, seconds=30))
    dropped = await _rotate(runtime)
    assert dropped.phases["rotate"].items["dropped"] == [old_kid]
    await _published(http, clock, [new_kid])
    latest = (await refresh(http, after["refreshToken"])).json()
    assert _kid(latest) == new_kid
    assert (await http.get(SESSIONS, headers=bearer(latest))).status_code == 200


async def test_two_jobs_at_once_create_one_key(
    runtime: Runtime, settings: Settings, database_url: str, clock: FixedClock
) -> None:
    """Both runs in flight at once, held at their first read of the table, then let go together.

    The keys' advisory lock makes the second find the first one's key; without it, the
    partial unique index would still leave one key (and the second run a no-op).
    """
    await _rotate(runtime)  # the first Current key
    clock.advance(POLICY.rotate_after)
    holder = await asyncpg.connect(database_url)
    runtimes = [
        build_runtime(
            settings,
            database_url,
            clock=clock,
            registry=new_registry(),
            database=worker_database(settings, database_url, max_size=1),
        )
        for _ in range(2)
    ]
    try:
        for each in runtimes:
            await each.database.open()
        holding = holder.transaction()
        await holding.start()
        await holder.execute("lock table identity.signing_keys in access exclusive mode")
        runs = [asyncio.create_task(_rotate(each)) for each in runtimes]

        async def both_wait() -> bool:
            waiting: int = await watcher.fetchval(
                "select count(*) from pg_stat_activity where datname = current_database() "
                "and wait_event_type = 'Lock'"
            )
            return waiting == 2

        watcher = await asyncpg.connect(database_url)
        try:
            await wait_until(both_wait, timeout=30)
        finally:
            await watcher.close()
        await holding.commit()
        results = await asyncio.gather(*runs)
    finally:
        await holder.close()
        for each in runtimes:
            await each.database.close()
    assert sorted(len(result.phases["rotate"].items["created"]) for result in results) == [0, 1]
    async with runtime.database.connection() as conn:
        statuses = sorted(row["status"] for row in await repository.signing_keys(conn))
    assert statuses == ["Current", "Next"]


def _run(*args: str, env: dict[str, str]) -> tuple[int, str, str]:
    """An operator's ``keys`` command, called in process."""
    ran = run_cli(*args, env=env)
    return ran.returncode, ran.stdout, ran.stderr


def _run_process(*args: str, env: dict[str, str]) -> tuple[int, str, str]:
    """A ``job`` as its own process: a job installs process-wide tracing."""
    process = pin_sessions(*args, env=env)
    out, err = process.communicate(timeout=60)
    return process.returncode, out, err


async def test_keys_rotate_now_replaces_a_leaked_key_and_its_tokens_are_401(
    http: httpx.AsyncClient, settings_env: dict[str, str], clock: FixedClock
) -> None:
    leaked = await sign_in(http)
    assert (await http.get(SESSIONS, headers=bearer(leaked))).status_code == 200
    code, out, err = _run("keys", "rotate", "--now", env=settings_env)
    assert code == 0, err
    answer = json.loads(out)
    assert answer["deleted"] == [_kid(leaked)]
    [replacement] = [key for key in answer["keys"] if key["status"] == "Current"]
    # Once the copy in use is 5 s old the set has been read again in the background (a
    # tick later, at most): from then on the old key's tokens are refused.
    clock.advance(timedelta(seconds=5))
    refused: list[httpx.Response] = []

    async def leaked_refused() -> bool:
        refused.append(await http.get(SESSIONS, headers=bearer(leaked)))
        return refused[-1].status_code == 401

    await wait_until(leaked_refused, timeout=10)
    assert refused[-1].json()["code"] == "AUTH_INVALID_TOKEN"
    assert await _kids(http) == [replacement["kid"]]
    # The very next token is signed by the new key, and works.
    fresh = await sign_in(http)
    assert _kid(fresh) == replacement["kid"]
    assert (await http.get(SESSIONS, headers=bearer(fresh))).status_code == 200


async def test_keys_list_and_rotate_publish_one_next_key(settings_env: dict[str, str]) -> None:
    code, out, err = _run("keys", "rotate", env=settings_env)
    assert code == 0, err
    assert [key["status"] for key in json.loads(out)["keys"]] == ["Current"]  # a new database
    for _ in range(2):
        code, out, err = _run("keys", "rotate", env=settings_env)
        assert code == 0, err
    listed = json.loads(_run("keys", "list", env=settings_env)[1])["keys"]
    assert [key["status"] for key in listed] == ["Current", "Next"]
    assert set(listed[0]) == {"kid", "status", "createdAt", "activatedAt", "retiredAt"}


def test_job_signing_keys_once_prints_what_it_did(settings_env: dict[str, str]) -> None:
    code, out, err = _run_process("job", "signing-keys", "--once", env=settings_env)
    assert code == 0, err
    result = json.loads(out)
    assert len(result["created"]) == len(result["activated"]) == 1
    assert (result["retired"], result["dropped"]) == ([], [])
    again = json.loads(_run_process("job", "signing-keys", "--once", env=settings_env)[1])
    assert again["created"] == []


async def test_an_unknown_kid_storm_reads_the_key_set_a_bounded_number_of_times(
    http: httpx.AsyncClient, registry: CollectorRegistry
) -> None:
    """Tokens naming made-up kids: each a 401, and the database is asked at most 10 times more."""
    tokens = await sign_in(http)
    assert (await http.get(SESSIONS, headers=bearer(tokens))).status_code == 200  # set read
    header = jwt.get_unverified_header(tokens["accessToken"])
    claims = jwt.decode(tokens["accessToken"], options={"verify_signature": False})
    before = registry.get_sample_value("pin_auth_key_set_loads_total")
    key = ec.generate_private_key(ec.SECP256R1())

    async def storm(index: int) -> httpx.Response:
        kid = uuid.uuid4().hex + uuid.uuid4().hex[:11]
        forged = jwt.encode(claims, key, algorithm="ES256", headers={**header, "kid": kid})
        return await http.get(SESSIONS, headers={"Authorization": f"Bearer {forged}"})

    # At once (the waiting requests share one read), then one after another.
    answers = list(await asyncio.gather(*(storm(index) for index in range(200))))
    answers += [await storm(index) for index in range(50)]
    assert {(answer.status_code, answer.json()["code"]) for answer in answers} == {
        (401, "AUTH_INVALID_TOKEN")
    }
    after = registry.get_sample_value("pin_auth_key_set_loads_total")
    assert before is not None and after is not None
    assert 1 <= after - before <= 10

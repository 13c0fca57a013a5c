"""Token benchmark: verifications per second, ES256 (cached key) against HS256; the token endpoint.

    python bench/tokens.py [--verifications 20000] [--rounds 3]
                           [--duration 8] [--connections 16] [--threads 2] [--workers 1]

1. Verification, in process, in the same run: the service's ``TokenVerifier`` with its key
   set warm (the cached ES256 public key; the clock held still, so the set is never read
   again) and its cache of verified tokens off, so each verification checks the signature,
   against what verification cost before, PyJWT's HS256 decode of the same claims under a
   shared secret with the same checks; and the service's verifier as it runs, a reused
   token found in its cache. Alternated for ``--rounds`` rounds, ``--verifications``
   tokens each, one CPU core.
2. ``POST /oauth/token`` through the real API (``pin-sessions serve --workers N``) under wrk
   (Debian package ``wrk``) with ``bench/oauth_token.lua``: a client registered with
   ``pin-sessions clients create``, HTTP Basic, the form body; each answer a signed m2m
   token (one statement to authenticate the client, one to read the Current key).

Prints one JSON object. PostgreSQL: ``PIN_DATABASE_URL`` when set, else an embedded server
in a temporary directory.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import jwt
from prometheus_client import CollectorRegistry
from route_inputs import basic_credentials
from serving import bench_database, free_port, running_server

from pin_sessions.bootstrap.database import build_runtime
from pin_sessions.bootstrap.identity import build_token_signer
from pin_sessions.identity.keys import PublishedKeys
from pin_sessions.platform.clock import FixedClock
from pin_sessions.platform.database import Database
from pin_sessions.platform.key_set import KeySet
from pin_sessions.platform.migrations import migrate
from pin_sessions.platform.tokens import TokenVerifier
from pin_sessions.settings import DEFAULT_PUBLIC_URL, load_settings

BENCH_DIR = Path(__file__).parent
LUA_SCRIPT = BENCH_DIR / "oauth_token.lua"
SECRET = "b" * 48
HS256_SECRET = b"h" * 48
NOW = datetime.now(UTC).replace(microsecond=0)
# The longest the first read of the key set may take.
WAIT = timedelta(seconds=10)


def _environment(dsn: str, data_dir: str) -> dict[str, str]:
    return {"PIN_DATABASE_URL": dsn, "PIN_DATA_DIR": data_dir, "PIN_SECRET_KEY": SECRET}


def _hs256_verify(token: str) -> uuid.UUID:
    """Verification before: one shared secret, the same claims checked."""
    claims = jwt.decode(
        token,
        HS256_SECRET,
        algorithms=["HS256"],
        issuer=DEFAULT_PUBLIC_URL,
        audience="pin-api",
        options={"verify_exp": False, "verify_iat": False},
    )
    if datetime.fromtimestamp(claims["exp"], UTC) <= NOW:
        raise ValueError("expired")
    return uuid.UUID(claims["sub"])


async def verification(dsn: str, env: dict[str, str], args: argparse.Namespace) -> dict[str, Any]:
    settings = load_settings(env)
    database = Database(dsn, max_size=1)
    runtime = build_runtime(settings, dsn, clock=FixedClock(NOW), database=database)
    # No verified token kept: every verification checks the signature.
    keys = KeySet(
        PublishedKeys(database),
        CollectorRegistry(),
        clock=runtime.clock,
        wait_limit=WAIT,
        token_cache_capacity=0,
    )
    cached_keys = KeySet(
        PublishedKeys(database), CollectorRegistry(), clock=runtime.clock, wait_limit=WAIT
    )
    await database.open()
    try:
        async with database.connection() as conn:
            signed = await build_token_signer(runtime).access_token(
                conn, uuid.uuid4(), uuid.uuid4(), now=NOW, auth_time=NOW
            )
        es256 = signed.token
        claims = jwt.decode(es256, options={"verify_signature": False})
        hs256 = jwt.encode(claims, HS256_SECRET, algorithm="HS256")
        verifier = TokenVerifier(keys, settings.effective_public_url)
        cached = TokenVerifier(cached_keys, settings.effective_public_url)
        for warm in (verifier, cached):
            await warm.verify(es256, now=NOW)  # the key set is read once, here

        async def es256_round(which: TokenVerifier = verifier) -> float:
            started = time.perf_counter()
            for _ in range(args.verifications):
                await which.verify(es256, now=NOW)
            count: int = args.verifications
            return count / (time.perf_counter() - started)

        def hs256_round() -> float:
            started = time.perf_counter()
            for _ in range(args.verifications):
                _hs256_verify(hs256)
            count: int = args.verifications
            return count / (time.perf_counter() - started)

        es, hs, reused = [], [], []
        for _ in range(args.rounds):
            es.append(await es256_round())
            hs.append(hs256_round())
            reused.append(await es256_round(cached))
    finally:
        await cached_keys.close()
        await keys.close()
        await database.close()
    return {
        "es256CachedKeyPerSecond": round(max(es)),
        "hs256PerSecond": round(max(hs)),
        "es256Rounds": [round(value) for value in es],
        "hs256Rounds": [round(value) for value in hs],
        "es256MicrosecondsEach": round(1e6 / max(es), 1),
        "hs256MicrosecondsEach": round(1e6 / max(hs), 1),
        "es256ReusedTokenPerSecond": round(max(reused)),
        "es256ReusedTokenMicrosecondsEach": round(1e6 / max(reused), 1),
    }


@contextlib.contextmanager
def _api(env: dict[str, str], workers: int) -> Iterator[int]:
    port = free_port()
    command = [sys.executable, "-m", "pin_sessions", "serve", "--port", str(port)]
    with running_server([*command, "--workers", str(workers)], env):
        yield port


def token_endpoint(env: dict[str, str], args: argparse.Namespace) -> dict[str, Any]:
    basic = basic_credentials(env)
    with _api({**env, "PIN_LOG_LEVEL": "warning"}, args.workers) as port:
        runs = [_wrk(port, basic, args, seconds) for seconds in (2, args.duration)]
    return {"warmup": runs[0], **runs[1]}


def _wrk(port: int, basic: str, args: argparse.Namespace, seconds: int) -> dict[str, Any]:
    result = subprocess.run(
        ["wrk", "-t", str(args.threads), "-c", str(args.connections), "-d", f"{seconds}s",
         "-s", str(LUA_SCRIPT), f"http://127.0.0.1:{port}", "--", basic],
        capture_output=True, text=True, timeout=seconds + 60,
    )  # fmt: skip
    if result.returncode != 0:
        raise RuntimeError(f"wrk failed: {result.stderr[-2000:]}")
    summary: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--verifications", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=int, default=8)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("bench/tokens.py drives POST /oauth/token with wrk: `apt-get install wrk`")
    with bench_database() as (dsn, _), tempfile.TemporaryDirectory(prefix="pin-bench-") as data_dir:
        asyncio.run(_migrate(dsn))
        env = _environment(dsn, data_dir)
        report = {
            "verification": asyncio.run(verification(dsn, env, args)),
            "tokenEndpoint": token_endpoint(env, args),
            "connections": args.connections,
            "workers": args.workers,
        }
    print(json.dumps(report))


async def _migrate(dsn: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await migrate(conn)
    finally:
        await conn.close()


if __name__ == "__main__":
    main()

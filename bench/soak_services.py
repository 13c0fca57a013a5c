"""The soak's other callers: a service with client credentials, a dev-stats viewer, erasures.

* The service (a client made with ``pin-sessions clients create``) fetches tokens at
  ``POST /oauth/token`` (HTTP Basic), introspects users' access tokens and its own at
  ``POST /oauth/introspect``, and asks ``GET /internal/sessions/{anonymousId}/link``.
* The viewer (a phone granted ``dev-stats.view`` with ``pin-sessions users grant``) signs in
  by the SMS code and reads the summary, the open-session count and the export: the
  dashboard's **Export CSV** is the summary of its whole range (up to 366 days), which the
  page turns into CSV, so that is the request it makes.
* A few users erase themselves — alternately ``DELETE /api/identity/me`` after a fresh
  sign-in (it needs a token issued within 10 minutes) and the operator's
  ``pin-sessions users erase --phone`` (SPEC §10).
"""

from __future__ import annotations

import asyncio
import base64
import json
import random
import sys
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlencode

from soak_traffic import Device, Tokens, User, World, refresh, sign_in
from soak_wire import CallFailed


@dataclass
class Erasures:
    """What the erasures did, for the books."""

    user_ids: set[str] = field(default_factory=set)
    phones: set[str] = field(default_factory=set)
    confirmed: set[str] = field(default_factory=set)  # answered 204, or the CLI exited 0
    by_route: int = 0
    by_cli: int = 0
    cli_failures: list[str] = field(default_factory=list)


@dataclass
class ServiceClient:
    client_id: str
    secret: str
    token: str | None = None
    issued: float = 0.0

    def basic(self) -> str:
        pair = f"{self.client_id}:{self.secret}".encode()
        return "Basic " + base64.b64encode(pair).decode()


async def service_loop(world: World, client: ServiceClient) -> None:
    """About two calls a second: tokens when needed, introspection, internal lookups."""
    rng = world.rng
    while not world.stopping.is_set():
        await asyncio.sleep(rng.uniform(0.2, 0.8))
        stale = world.signed_before_a_rotation(client.issued)
        if client.token is None or stale or world.recorder.now() - client.issued > 60:
            await _fetch_token(world, client)
            continue
        if rng.random() < 0.5:
            await _introspect(world, client, rng)
        else:
            await _internal_link(world, client, rng)


async def _fetch_token(world: World, client: ServiceClient) -> None:
    try:
        answer = await world.wire.call(
            "oauth token", "POST", "/oauth/token",
            form=urlencode({"grant_type": "client_credentials"}).encode(),
            headers={"Authorization": client.basic()},
        )  # fmt: skip
    except CallFailed:
        return
    if answer.status == 200:
        client.token = answer.json()["access_token"]
        client.issued = world.recorder.now()


async def _introspect(world: World, client: ServiceClient, rng: random.Random) -> None:
    signed_in = [device.tokens for device in world.devices.values() if device.tokens is not None]
    token = rng.choice(signed_in).access if signed_in and rng.random() < 0.8 else client.token
    assert token is not None
    try:
        await world.wire.call(
            "oauth introspect", "POST", "/oauth/introspect",
            form=urlencode({"token": token}).encode(),
            headers={"Authorization": client.basic()},
        )  # fmt: skip
    except CallFailed:
        return


async def _internal_link(world: World, client: ServiceClient, rng: random.Random) -> None:
    if not world.devices:
        return
    device = rng.choice(list(world.devices.values()))
    refusable = world.signed_before_a_rotation(client.issued)
    try:
        answer = await world.wire.call(
            "internal link", "GET", f"/internal/sessions/{device.anonymous_id}/link",
            headers={"Authorization": f"Bearer {client.token}"},
            # A device whose start was not answered yet, or whose sessions went with an
            # erased user, is unknown.
            expect=frozenset({404} | ({401} if refusable else set())),
        )  # fmt: skip
    except CallFailed:
        return
    if answer.status == 401:
        client.token = None


async def viewer_loop(world: World, phone: str) -> None:
    """The dashboard open all run long: summary, open sessions, now and then an export."""
    rng = world.rng
    device = Device(anonymous_id=_uuid(rng), user_agent="soak-viewer", interval=0, bot=False)
    device.user = User(phone=phone)
    tick = 0
    while not world.stopping.is_set():
        if device.tokens is None:
            device.tokens = await sign_in(world, device, device.user)
            if device.tokens is None:
                await asyncio.sleep(1.0)
                continue
        if world.token_may_be_refused(device) and not await refresh(world, device):
            device.tokens = None
            continue
        tick += 1
        today = datetime.now(UTC).date()
        if tick % 5 == 0:
            route, query = "dev-stats export", f"?from={today - timedelta(days=365)}&to={today}"
        else:
            route, query = "dev-stats summary", ""
        await _read(world, device, route, f"/api/dev-stats/sessions/summary{query}")
        await _read(world, device, "open sessions", "/api/user-activity/sessions/open-count")
        await asyncio.sleep(rng.uniform(1.0, 3.0))


async def _read(world: World, device: Device, route: str, path: str) -> None:
    tokens = device.tokens
    if tokens is None:
        return
    try:
        answer = await world.wire.call(
            route, "GET", path, headers={"Authorization": f"Bearer {tokens.access}"},
            expect=frozenset({401}) if world.token_may_be_refused(device) else frozenset(),
        )  # fmt: skip
    except CallFailed:
        return
    if answer.status == 401:
        await refresh(world, device)


def _uuid(rng: random.Random) -> str:
    return str(__import__("uuid").UUID(int=rng.getrandbits(128), version=4))


async def erasure_loop(
    world: World, erasures: Erasures, count: int, env: dict[str, str], log: Path
) -> None:
    """``count`` erasures spread over the run's middle, by route and by CLI in turn."""
    if count <= 0:
        return
    gap = world.plan.duration * 0.8 / (count + 1)
    index = 0
    while index < count and not world.stopping.is_set():
        await asyncio.sleep(gap if index else gap / 2)
        # On a slow machine nobody may be signed in yet, or the fresh sign-in an erasure by
        # route needs may fail: try again a second later rather than skip the erasure.
        while not world.stopping.is_set():
            candidates = [
                device for device in world.devices.values()
                if device.user is not None and device.tokens is not None
                and not device.user.erased and not device.user.erasure_pending
                and device.user.user_id is not None and device.user_agent != "soak-viewer"
            ]  # fmt: skip
            if candidates:
                device = world.rng.choice(candidates)
                user = device.user
                assert user is not None and user.user_id is not None
                # No new sign-in of this user from now on; the ones in flight end first.
                user.erasure_pending = True
                await user.no_sign_in.wait()
                if index % 2 == 0:
                    done = await _erase_by_route(world, erasures, device, user)
                else:
                    done = await _erase_by_cli(world, erasures, user, env, log)
                if done:
                    break
                user.erasure_pending = False
            await asyncio.sleep(1.0)
        index += 1


async def _erase_by_route(world: World, erasures: Erasures, device: Device, user: User) -> bool:
    fresh: Tokens | None = await sign_in(world, device, user, for_erasure=True)  # issued now
    if fresh is None:
        return False
    device.tokens = fresh
    _erasing(world, erasures, user)
    try:
        answer = await world.wire.call(
            "erase", "DELETE", "/api/identity/me",
            headers={"Authorization": f"Bearer {fresh.access}"},
        )  # fmt: skip
    except CallFailed:
        return True  # asked: it may stand (the books count it by identity.erasures)
    if answer.status == 204:
        erasures.by_route += 1
        erasures.confirmed.add(fresh.user_id)
    return True


async def _erase_by_cli(
    world: World, erasures: Erasures, user: User, env: dict[str, str], log: Path
) -> bool:
    _erasing(world, erasures, user)
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "pin_sessions", "users", "erase", "--phone", user.phone,
        "--wait-seconds", "120", env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await process.communicate()
    with log.open("ab") as handle:
        handle.write(err)
    if process.returncode == 0:
        erasures.by_cli += 1
        first = json.loads(out.decode().splitlines()[0])
        assert first["userId"] == user.user_id
        erasures.confirmed.add(str(first["userId"]))
    else:
        erasures.cli_failures.append(f"exit {process.returncode}: {err.decode()[-300:]}")
    return True


def _erasing(world: World, erasures: Erasures, user: User) -> None:
    """From now on a 401 for this user's tokens is what the scenario expects."""
    assert user.user_id is not None
    user.erasing_since = world.recorder.now()
    erasures.user_ids.add(user.user_id)
    erasures.phones.add(user.phone)

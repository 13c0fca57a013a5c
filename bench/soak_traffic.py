"""The soak's devices: what a browser with the tracker does, many at once.

A population of ``devices`` devices is kept alive for the run. Each starts its session
(most with an ``X-Anonymous-Id`` of their own, as the tracker does; some let the server
issue one), heartbeats on its own interval (together, about ``rate`` per second), now and
then records an action or a property view with an ``Idempotency-Key`` (a timed-out or
refused call is sent again with the same key; a few are repeated on purpose and must get
the first answer), ends views, reads its own history, and some sign in by the code the SMS
webhook receives, link, and refresh. After its lifetime a device leaves (its session is
closed by the closer); a few come back later with the same id, after their session was
closed (INV-SES-003: a heartbeat restarts one). A few are bots.

Every 2xx that names something written (a session, an action, a view, a user, a refresh
session) goes into the :class:`Ledger`, which the books check at the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from soak_sms import SmsGateway
from soak_wire import Answer, CallFailed, Recorder, Wire

BROWSER = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/138.0 Safari/537.36"  # noqa: E501
PHONE = "Mozilla/5.0 (iPhone; CPU iPhone OS 18_0 like Mac OS X) AppleWebKit/605.1.15 Mobile/15E148"
BOT = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"
UA = "/api/user-activity"
RETRY_PAUSE = 0.5
WRITE_TRIES = 3
# The service's PIN_REFRESH_REUSE_INTERVAL (SPEC §2's default, which the soak keeps): a
# refresh token presented again within it gets the same successor; later, it is reuse.
REFRESH_REUSE_INTERVAL = 10.0
# How long the service takes to answer at most during a database stall (SPEC §11: the
# statement timeout, 5 s, and a second): a retried refresh must be answered within the
# reuse interval of its first send, so it is sent only this long before the interval ends.
ANSWER_BOUND = 6.0


@dataclass
class Tokens:
    access: str
    refresh: str
    user_id: str
    issued: float  # run time the pair was issued
    # A refresh of this pair went unanswered (timeout, 503): it may have rotated it, so its
    # access token's session may no longer be Active, and presenting the refresh token
    # again past PIN_REFRESH_REUSE_INTERVAL is reuse (401, the family revoked: SPEC §3).
    in_doubt: bool = False
    # A refresh of this pair was sent: the server may have rotated its session (no longer
    # Active) before the client reads the answer, so a call with the access token may meet
    # that first.
    refreshing: bool = False


def _set_event() -> asyncio.Event:
    event = asyncio.Event()
    event.set()
    return event


@dataclass
class User:
    phone: str
    user_id: str | None = None
    # When a code was asked for this phone: every sign-in request sent, answered or not, in
    # flight included. The service allows 5 per phone in 15 minutes (SPEC §8): counting only
    # the sign-ins that succeeded, several devices picked one user at once while its requests
    # were in flight, and a loaded machine's run met its 429s.
    code_requests: list[float] = field(default_factory=list)
    erasing_since: float | None = None  # run time its erasure was asked for
    # Chosen for an erasure: no sign-in starts but the erasure's own. A sign-in whose request
    # lands after the erasure is a new sign-up under the same phone, which SPEC §10 allows and
    # the books could not tell from a trace the erasure missed.
    erasure_pending: bool = False
    signing_in: int = 0  # sign-ins in flight
    no_sign_in: asyncio.Event = field(default_factory=_set_event)  # set while signing_in == 0

    @property
    def erased(self) -> bool:
        return self.erasing_since is not None


@dataclass
class Device:
    anonymous_id: str
    user_agent: str
    interval: float
    bot: bool
    user: User | None = None
    tokens: Tokens | None = None
    views: list[str] = field(default_factory=list)
    erased_beats: int = 0  # heartbeats sent with an erased user's token
    live: bool = False  # within a life: started, heartbeating
    # Everyone who signed in here: an erasure of any of them takes the sessions they were
    # linked to on this device, and those sessions' views (a later end is 404).
    users_seen: list[User] = field(default_factory=list)

    @property
    def lost_to_erasure(self) -> bool:
        return any(user.erased for user in self.users_seen)


@dataclass
class Ledger:
    """Every write the service acknowledged with a 2xx, and what repeats answered."""

    sessions: set[str] = field(default_factory=set)
    actions: set[str] = field(default_factory=set)
    views: set[str] = field(default_factory=set)
    ended_views: set[str] = field(default_factory=set)
    users: set[str] = field(default_factory=set)
    refresh_sessions: dict[str, str] = field(default_factory=dict)  # session → user
    refused_view_ends: set[str] = field(default_factory=set)  # 404 to their own device
    refreshes_given_up: int = 0  # unanswered past the reuse interval: the pair dropped
    repeats_same: int = 0
    repeats_different: int = 0
    repeats_refused: int = 0  # sent with a token refused by then, for a reason the run knows
    restarts_seen: int = 0
    sign_ins: int = 0
    links: int = 0
    switches: int = 0


@dataclass
class Plan:
    duration: float
    devices: int
    rate: float
    sign_in_share: float = 0.25
    bot_share: float = 0.05
    return_share: float = 0.1
    activity_every: float = 12.0  # seconds between a device's actions/views, on average
    refresh_every: float = 30.0
    closer_threshold: float = 8.0
    # Seconds over which the first devices arrive (the warm-up): all of them at once is a
    # herd no steady state sees, and a service just started would be judged on it.
    ramp: float = 5.0


@dataclass
class World:
    """What every actor of the driver shares."""

    wire: Wire
    sms: SmsGateway
    recorder: Recorder
    plan: Plan
    rng: random.Random
    ledger: Ledger = field(default_factory=Ledger)
    users: list[User] = field(default_factory=list)
    devices: dict[str, Device] = field(default_factory=dict)
    # Each `keys rotate --now`: [started, finished] (run times; finished None while it runs).
    rotations: list[list[float | None]] = field(default_factory=list)
    stopping: asyncio.Event = field(default_factory=asyncio.Event)
    locked_device: str | None = None  # whose session row a fault holds locked

    def label(self, route: str, device: Device) -> str:
        """The route, told apart for the device whose row is held (``lock-session``): every
        call of that device may wait for the row, or fail; no other call may."""
        return f"{route} (locked device)" if device.anonymous_id == self.locked_device else route

    def token_may_be_refused(self, device: Device) -> bool:
        """A 401 the scenario explains: the key that signed it was deleted, or its user erased."""
        tokens = device.tokens
        if tokens is None:
            return False
        user = device.user
        return (
            self.signed_before_a_rotation(tokens.issued)
            or tokens.in_doubt
            or bool(user and user.erased)
        )

    def signed_before_a_rotation(self, issued: float) -> bool:
        """Whether a token issued at ``issued`` may have been signed by a key since deleted:
        ``keys rotate --now`` deletes the old key when it commits, before it exits."""
        return any(done is None or issued <= done for _, done in self.rotations)

    def replaced(self, device: Device, sent: Tokens | None) -> Callable[[Answer], bool]:
        """Explains a 401 for a pair a refresh of this device rotated, or was rotating,
        while the call flew (the rotated session is no longer Active: SPEC §4), or whose
        user's erasure was asked meanwhile (it revokes every session of the user at once)."""
        user = device.user
        return lambda answer: (
            answer.status == 401
            and sent is not None
            and (device.tokens is not sent or sent.refreshing or bool(user and user.erased))
        )

    def bearer(self, device: Device, headers: dict[str, str]) -> dict[str, str]:
        if device.tokens is not None:
            headers["Authorization"] = f"Bearer {device.tokens.access}"
        return headers


# --- identity ----------------------------------------------------------------------------


async def sign_in(
    world: World, device: Device, user: User, *, for_erasure: bool = False
) -> Tokens | None:
    """Ask for a code, read it from the SMS webhook, confirm it on ``device``; None when it
    failed, or when ``user`` is being erased (unless this is the erasure's own sign-in)."""
    if (user.erased or user.erasure_pending) and not for_erasure:
        return None
    user.signing_in += 1
    user.no_sign_in.clear()
    try:
        return await _sign_in(world, device, user)
    finally:
        user.signing_in -= 1
        if not user.signing_in:
            user.no_sign_in.set()


async def _sign_in(world: World, device: Device, user: User) -> Tokens | None:
    wire = world.wire
    user.code_requests.append(world.recorder.now())  # before any await: picks see it at once
    try:
        asked = await wire.call(
            "sign-in request", "POST", "/api/identity/sign-in/requests",
            json_body={"phoneNumber": user.phone},
        )  # fmt: skip
        if asked.status != 201:
            return None
        request_id = asked.json()["requestId"]
        try:
            code = await world.sms.code(request_id, within=15)
        except TimeoutError:
            world.sms.forget(request_id)
            return None
        confirmed = await wire.call(
            world.label("sign-in confirm", device), "POST", "/api/identity/sign-in/confirm",
            json_body={"requestId": request_id, "code": code},
            headers={"X-Anonymous-Id": device.anonymous_id, "User-Agent": device.user_agent},
        )  # fmt: skip
    except CallFailed:
        return None
    if confirmed.status != 200:
        return None
    tokens = _tokens(world, confirmed)
    user.user_id = tokens.user_id
    world.ledger.sign_ins += 1
    return tokens


def _tokens(world: World, answer: Answer) -> Tokens:
    pair = answer.json()
    world.ledger.users.add(pair["userId"])
    world.ledger.refresh_sessions[pair["sessionId"]] = pair["userId"]
    return Tokens(pair["accessToken"], pair["refreshToken"], pair["userId"], world.recorder.now())


async def refresh(world: World, device: Device) -> bool:
    """Rotate the device's refresh token, as a careful client does.

    A refresh left unanswered, or answered 503, may have rotated the token all the same: it
    is sent again with the same token only while the retry is answered within
    ``PIN_REFRESH_REUSE_INTERVAL`` of the first send (at most ``ANSWER_BOUND`` later), and
    then gets the same successor. Past that a retry may be reuse and revoke the family
    (SPEC §3), so the client gives the pair up and the device goes on signed out. A 503 is
    retried after its ``Retry-After``. No 401 is expected but for an erased user: a family
    revoked by this client's own retry is a finding (the soak found it under overload).
    """
    tokens, user = device.tokens, device.user
    if tokens is None:
        return False
    last_retry_at = world.recorder.now() + REFRESH_REUSE_INTERVAL - ANSWER_BOUND
    tokens.refreshing = True
    while True:
        try:
            answer = await world.wire.call(
                "refresh", "POST", "/api/identity/sessions/refresh",
                json_body={"refreshToken": tokens.refresh},
                headers={"User-Agent": device.user_agent},
                # Judged once answered: the user may be erased while the call flies.
                explain=lambda answer: answer.status == 401 and bool(user and user.erased),
            )  # fmt: skip
        except CallFailed:
            tokens.in_doubt = True
            answer = None
        if answer is not None and answer.status == 200:
            if device.tokens is tokens:
                device.tokens = _tokens(world, answer)
            return True
        if answer is not None and answer.status == 401:
            device.tokens = None  # signed out (erased): the device goes on as a guest
            return False
        if answer is not None and answer.status != 503:
            return False
        pause = RETRY_PAUSE
        if answer is not None:
            if answer.retry_after is None:
                tokens.in_doubt = True  # a 503 of the database's bound may follow a commit
            pause = answer.retry_after or RETRY_PAUSE  # turned away unstarted: nothing done
        if world.recorder.now() + pause > last_retry_at:
            world.ledger.refreshes_given_up += 1
            if device.tokens is tokens:
                device.tokens = None  # the pair may be spent: sign in again, not reuse it
            return False
        await asyncio.sleep(pause)


def pick_user(world: World, device: Device) -> User:
    """Mostly a newcomer; sometimes a known user on another device (or after another user)."""
    now = world.recorder.now()
    known = [
        user for user in world.users
        if not user.erased and not user.erasure_pending and user.user_id is not None
        # Four: one left of the five for the erasure's own sign-in.
        and sum(1 for at in user.code_requests if now - at < 900) < 4
    ]  # fmt: skip
    if known and world.rng.random() < 0.25:
        return world.rng.choice(known)
    user = User(phone="+4479" + str(world.rng.randrange(10**8)).zfill(8))
    world.users.append(user)
    return user


# --- a device's life ---------------------------------------------------------------------


async def device_life(world: World, device: Device, lifetime: float, *, returning: bool) -> None:
    """Start (or come back), heartbeat and act until the lifetime or the run ends."""
    world.devices[device.anonymous_id] = device
    if not returning and not await _start(world, device):
        return
    ends = world.recorder.now() + lifetime
    activity = asyncio.create_task(_activities(world, device, ends))
    device.live = True
    try:
        await _heartbeats(world, device, ends, returning=returning)
    finally:
        device.live = False
        activity.cancel()
        await asyncio.gather(activity, return_exceptions=True)
    for view_id in list(device.views):
        if world.rng.random() < 0.7:
            await end_view(world, device, view_id)


async def _start(world: World, device: Device) -> bool:
    own_id = world.rng.random() < 0.8
    headers = {"User-Agent": device.user_agent}
    if own_id:
        headers["X-Anonymous-Id"] = device.anonymous_id
    for _ in range(WRITE_TRIES):
        try:
            answer = await world.wire.call(
                world.label("start", device), "POST", f"{UA}/sessions/start", headers=headers
            )
        except CallFailed:
            if not own_id:
                return False  # without its own id, a retry would be another device
            await asyncio.sleep(RETRY_PAUSE)
            continue
        if answer.status == 200:
            started = answer.json()
            world.ledger.sessions.add(started["sessionId"])
            if not own_id:
                del world.devices[device.anonymous_id]
                device.anonymous_id = started["anonymousId"]
                world.devices[device.anonymous_id] = device
            return True
        await asyncio.sleep(RETRY_PAUSE)
    return False


async def _heartbeats(world: World, device: Device, ends: float, *, returning: bool) -> None:
    due = world.recorder.now() + (0.0 if returning else world.rng.uniform(0, device.interval))
    while True:
        await asyncio.sleep(max(0.0, due - world.recorder.now()))
        if world.recorder.now() >= ends or world.stopping.is_set():
            return
        await heartbeat(world, device, due)
        due += device.interval


async def heartbeat(world: World, device: Device, due: float | None = None) -> None:
    headers = world.bearer(device, {"X-Anonymous-Id": device.anonymous_id})
    headers["User-Agent"] = device.user_agent
    refusable = world.token_may_be_refused(device)
    try:
        answer = await world.wire.call(
            world.label("heartbeat", device), "POST", f"{UA}/sessions/heartbeat", headers=headers,
            expect=frozenset({401}) if refusable else frozenset(), due=due,
            explain=world.replaced(device, device.tokens),
        )  # fmt: skip
    except CallFailed:
        return
    if answer.ok:
        beat = answer.json()
        world.ledger.sessions.add(beat["sessionId"])
        world.ledger.restarts_seen += bool(beat["restarted"])
    if device.user is not None and device.user.erased:
        device.erased_beats += 1
        if device.erased_beats >= 3:
            device.tokens, device.user = None, None  # the tracker signs out at last
    elif answer.status == 401 and refusable:
        await refresh(world, device)


async def _activities(world: World, device: Device, ends: float) -> None:
    rng = world.rng
    if not device.bot and rng.random() < world.plan.sign_in_share:
        await asyncio.sleep(rng.uniform(0.5, 3.0))
        await sign_in_and_link(world, device)
    while world.recorder.now() < ends and not world.stopping.is_set():
        await asyncio.sleep(rng.expovariate(1.0 / world.plan.activity_every))
        if device.tokens is not None and (
            world.recorder.now() - device.tokens.issued > world.plan.refresh_every
        ):
            await refresh(world, device)
        roll = rng.random()
        if device.tokens is not None and roll < 0.05:
            # Another user signs in on this device: the link switches it (INV-SES-002).
            await sign_in_and_link(world, device)
        elif roll < 0.4:
            await record_action(world, device)
        elif roll < 0.75:
            await start_view(world, device)
        elif roll < 0.9 and device.views:
            await end_view(world, device, device.views[0])
        else:
            await read_history(world, device)


async def sign_in_and_link(world: World, device: Device) -> None:
    user = pick_user(world, device)
    tokens = await sign_in(world, device, user)
    if tokens is None:
        return
    if device.user is not None and device.user is not user:
        world.ledger.switches += 1
    device.user, device.tokens = user, tokens
    device.users_seen.append(user)
    if world.rng.random() < 0.5:
        return  # the sign-ins consumer links the device
    headers = world.bearer(device, {"X-Anonymous-Id": device.anonymous_id})
    try:
        answer = await world.wire.call(
            world.label("link", device), "POST", f"{UA}/sessions/link", headers=headers,
            expect=frozenset({401}) if world.token_may_be_refused(device) else frozenset(),
            explain=world.replaced(device, device.tokens),
        )  # fmt: skip
    except CallFailed:
        return
    if answer.ok:
        world.ledger.sessions.add(answer.json()["sessionId"])
        world.ledger.links += 1


async def _keyed_write(
    world: World, device: Device, route: str, path: str, body: dict[str, object]
) -> Answer | None:
    """A write with an ``Idempotency-Key``: sent again with the same key until answered."""
    key = uuid.uuid4().hex
    for _ in range(WRITE_TRIES):
        sent = device.tokens
        headers = world.bearer(
            device, {"X-Anonymous-Id": device.anonymous_id, "Idempotency-Key": key}
        )
        refusable = world.token_may_be_refused(device)
        try:
            answer = await world.wire.call(
                world.label(route, device), "POST", path, headers=headers, json_body=body,
                expect=frozenset({401}) if refusable else frozenset(),
                explain=world.replaced(device, device.tokens),
            )  # fmt: skip
        except CallFailed:
            await asyncio.sleep(RETRY_PAUSE)
            continue
        if answer.status == 401 and refusable and not (device.user and device.user.erased):
            await refresh(world, device)
            continue
        if answer.status != 503:
            break
        await asyncio.sleep(RETRY_PAUSE)
    else:
        return None
    if answer.status == 201 and world.rng.random() < 0.05:
        await _repeat(world, device, sent, route, path, headers, body, answer)
    return answer


async def _repeat(
    world: World, device: Device, sent: Tokens | None, route: str, path: str,
    headers: dict[str, str], body: dict[str, object], first: Answer,
) -> None:  # fmt: skip
    """The same key again, on purpose: it must record nothing and answer as the first time.

    It carries the first call's token, so a refusal that token may meet by now (its key
    deleted by ``keys rotate --now``, its pair rotated by a refresh, its user erased) is
    explained, and says nothing of the key: authentication comes before the key is read.
    """
    refusable = world.token_may_be_refused(device)
    explain = world.replaced(device, sent)
    try:
        again = await world.wire.call(
            f"{world.label(route, device)} (repeat)", "POST", path, headers=headers,
            json_body=body, expect=frozenset({401}) if refusable else frozenset(),
            explain=explain,
        )  # fmt: skip
    except CallFailed:
        return
    if again.status == 201 and again.json() == first.json():
        world.ledger.repeats_same += 1
    elif again.status == 401 and (refusable or explain(again)):
        world.ledger.repeats_refused += 1
    elif again.status != 503:
        world.ledger.repeats_different += 1


async def record_action(world: World, device: Device) -> None:
    body: dict[str, object] = {"type": "soak.click", "data": {"n": world.rng.randrange(1000)}}
    if world.rng.random() < 0.5:
        body["propertyObjectId"] = str(uuid.uuid4())
    answer = await _keyed_write(world, device, "action", f"{UA}/actions", body)
    if answer is not None and answer.status == 201:
        recorded = answer.json()
        world.ledger.actions.add(recorded["actionId"])
        world.ledger.sessions.add(recorded["sessionId"])


async def start_view(world: World, device: Device) -> None:
    body: dict[str, object] = {"propertyObjectId": str(uuid.uuid4())}
    answer = await _keyed_write(world, device, "property view", f"{UA}/property-views", body)
    if answer is not None and answer.status == 201:
        started = answer.json()
        world.ledger.views.add(started["viewId"])
        world.ledger.sessions.add(started["sessionId"])
        device.views.append(started["viewId"])


async def end_view(world: World, device: Device, view_id: str) -> None:
    device.views.remove(view_id)
    erased = device.lost_to_erasure
    try:
        answer = await world.wire.call(
            world.label("property view end", device), "POST",
            f"{UA}/property-views/{view_id}/end",
            headers={"X-Anonymous-Id": device.anonymous_id},
            expect=frozenset({404}) if erased else frozenset(),
        )  # fmt: skip
    except CallFailed:
        return
    if answer.status == 200:
        world.ledger.ended_views.add(view_id)
    elif answer.status == 404:
        world.ledger.refused_view_ends.add(view_id)  # the books check it went with an erasure


async def read_history(world: World, device: Device) -> None:
    headers = world.bearer(device, {"X-Anonymous-Id": device.anonymous_id})
    refusable = world.token_may_be_refused(device)
    try:
        await world.wire.call(
            world.label("history", device), "GET", f"{UA}/sessions?limit=5", headers=headers,
            expect=frozenset({401}) if refusable else frozenset(),
            explain=world.replaced(device, device.tokens),
        )  # fmt: skip
    except CallFailed:
        return


# --- the population ----------------------------------------------------------------------


def new_device(world: World, anonymous_id: str | None = None) -> Device:
    rng = world.rng
    plan = world.plan
    bot = rng.random() < plan.bot_share
    mean_interval = plan.devices / plan.rate
    return Device(
        anonymous_id=anonymous_id or str(uuid.uuid4()),
        user_agent=BOT if bot else rng.choice((BROWSER, PHONE)),
        interval=min(mean_interval * rng.uniform(0.6, 1.4), plan.closer_threshold * 0.6),
        bot=bot,
    )


async def population(world: World) -> None:
    """Keep ``plan.devices`` devices alive until the run's end."""
    plan = world.plan
    longest = max(10.0, min(90.0, plan.duration * 0.6))

    async def slot(index: int) -> None:
        await asyncio.sleep(world.rng.uniform(0, plan.ramp))
        device = new_device(world)
        returning = False
        while not world.stopping.is_set():
            lifetime = world.rng.uniform(0.3, 1.0) * longest
            await device_life(world, device, lifetime, returning=returning)
            if world.rng.random() < plan.return_share and not device.bot:
                # Away past the inactivity threshold: the closer ends the session, the next
                # heartbeat starts another (restarted: true).
                await _sleep_unless_stopping(world, plan.closer_threshold + 4.0)
                device.views.clear()
                returning = True
            else:
                device = new_device(world)
                returning = False

    await asyncio.gather(*(slot(index) for index in range(plan.devices)))


async def _sleep_unless_stopping(world: World, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(world.stopping.wait(), seconds)

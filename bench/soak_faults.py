"""The soak's faults, one after another, each recorded as a window of the run.

``default`` runs, in this order, with ``gap`` seconds of calm between two windows, and
runs again from the top while another pass fits in the run (a 20-minute soak makes several):

* ``kill-api-worker`` — SIGKILL one worker of ``serve --workers 2``; its supervisor starts
  another. The window ends when the new worker logs that it listens.
* ``kill-consumer``, ``kill-job`` — SIGKILL ``consume dev-stats-session-ended`` and ``job
  activity-closer``; the soak starts each again at once, as an orchestrator would. The
  window ends when the new process serves its metrics.
* ``kill-relay`` — the same for ``relay`` on Kafka. The PostgreSQL bus has no relay (its
  consumers read the outbox): skipped there.
* ``freeze-postgres`` — SIGSTOP the soak's own PostgreSQL (postmaster and every backend)
  for ``pause`` seconds. With ``--database-url`` the server is not the soak's: skipped.
* ``freeze-broker`` — SIGSTOP the broker for ``pause`` seconds. On the PostgreSQL bus
  there is no broker; the bus is its readers, so the fault freezes every consumer process
  instead (events pile up in the outbox and must all be applied once they thaw).
* ``kill-broker`` — on Kafka, SIGKILL the broker leading ``session-ended``'s partition 0, one
  of the cluster's three (topics replicated on all three, ``min.insync.replicas`` 2: the
  other two keep taking ``acks=all`` writes). It stays down for ``pause`` seconds, then
  starts again on its data; the window ends when all three brokers are registered again.
  The PostgreSQL bus has no broker: skipped there.
* ``rotate-keys`` — ``pin-sessions keys rotate --now`` (a leaked key): every token signed
  before stops verifying within 5 s (the key set's cache age), which ends the window.

``all`` adds, last, a fault of isolation (SPEC §11) rather than of infrastructure:

* ``lock-session`` — a transaction holds one live device's session row (``FOR UPDATE``,
  as a closer batch, a link, an erasure or a consumer does) for ``pause`` + 3 s, past the
  API's statement timeout. That device's calls (all of them: a heartbeat, a link, an
  action...) are labelled ``… (locked device)`` and may
  wait or fail; every other call of the window is judged as if nothing happened: no
  failure at all, not even a 503.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol

import asyncpg
from soak_processes import Fleet, Role, freeze, postmaster_pid, process_tree, thaw
from soak_report import Window
from soak_traffic import World

KEY_CACHE_SECONDS = 5.0
READY_TIMEOUT = 90.0
DEFAULT = (
    "kill-api-worker", "kill-consumer", "kill-job", "kill-relay", "freeze-postgres",
    "freeze-broker", "kill-broker", "rotate-keys",
)  # fmt: skip
ALL = (*DEFAULT, "lock-session")
LOCK_SESSION = """
select id from user_activity.sessions
where anonymous_id = $1::uuid and status = 'Active'
for update
"""


SESSION_ENDED = "pin.user-activity.session-ended.v1"


class Broker(Protocol):
    """What the faults ask of the Kafka cluster (``tests.support.kafka.KafkaCluster``)."""

    def freeze(self) -> None: ...
    def thaw(self) -> None: ...
    def leader_of(self, topic: str, partition: int) -> int: ...
    def kill(self, node_id: int) -> None: ...
    def restart(self, node_id: int) -> None: ...
    def node_ids(self) -> set[int]: ...
    def wait_for_brokers(self, expected: set[int], *, timeout: float = ...) -> None: ...


class Faults:
    """Runs the schedule; ``windows`` holds what happened, in order."""

    def __init__(
        self,
        world: World,
        fleet: Fleet,
        *,
        env: dict[str, str],
        pgdata: Path | None,
        broker: Broker | None,
        pause: float,
        gap: float,
        serve_log: Path,
        dsn: str | None = None,
    ) -> None:
        self.world = world
        self.fleet = fleet
        self.env = env
        self.pgdata = pgdata
        self.broker = broker
        self.pause = pause
        self.gap = gap
        self.serve_log = serve_log
        self.dsn = dsn
        self.windows: list[Window] = []

    def now(self) -> float:
        return self.world.recorder.now()

    async def run(self, names: tuple[str, ...], first_at: float, until: float) -> None:
        """The schedule from ``first_at``, again and again while another pass, as long as
        the last one, ends before ``until``: a long soak meets every fault many times."""
        steps: dict[str, Callable[[], Awaitable[Window]]] = {
            "kill-api-worker": self._kill_api_worker,
            "kill-consumer": lambda: self._kill_role("kill-consumer", "dev-stats-session-ended"),
            "kill-job": lambda: self._kill_role("kill-job", "activity-closer"),
            "kill-relay": self._kill_relay,
            "freeze-postgres": self._freeze_postgres,
            "freeze-broker": self._freeze_broker,
            "kill-broker": self._kill_broker,
            "rotate-keys": self._rotate_keys,
            "lock-session": self._lock_session,
        }
        await asyncio.sleep(max(0.0, first_at - self.now()))
        while True:
            began, ran = self.now(), 0
            for name in names:
                window = await steps[name]()
                self.windows.append(window)
                if window.skipped is None:
                    ran += 1
                    await asyncio.sleep(self.gap)
            if not ran or self.now() + (self.now() - began) > until:
                return

    def _skipped(self, name: str, why: str) -> Window:
        at = self.now()
        return Window(name, at, at, skipped=why)

    async def _kill_api_worker(self) -> Window:
        api = self.fleet.named("api")
        workers = [
            process for process in process_tree(api.pid)[1:]
            if "spawn_main" in " ".join(_cmdline(process))
        ]  # fmt: skip
        if not workers:
            return self._skipped("kill-api-worker", "no API worker process found")
        listening = self._listening_lines()
        start = self.now()
        workers[0].kill()
        await self._until(lambda: self._listening_lines() > listening, "a new API worker")
        return Window("kill-api-worker", start, self.now(), f"pid {workers[0].pid}")

    def _listening_lines(self) -> int:
        return self.serve_log.read_text(errors="replace").count('"listening"')

    async def _kill_role(self, name: str, role_name: str) -> Window:
        role = self.fleet.named(role_name)
        start = self.now()
        pid = role.pid
        role.faulted = True
        try:
            await asyncio.to_thread(role.kill)
        finally:
            role.start()
            role.faulted = False
        await self._until_ready(role)
        return Window(name, start, self.now(), f"{role_name}, pid {pid}")

    async def _kill_relay(self) -> Window:
        if not any(role.name == "relay" for role in self.fleet.roles):
            return self._skipped(
                "kill-relay", "the PostgreSQL bus has no relay: its consumers read the outbox"
            )
        return await self._kill_role("kill-relay", "relay")

    async def _freeze_postgres(self) -> Window:
        pid = None if self.pgdata is None else postmaster_pid(self.pgdata)
        if pid is None:
            return self._skipped(
                "freeze-postgres", "the database is not the soak's own (--database-url)"
            )
        processes = process_tree(pid)
        start = self.now()
        freeze(processes)
        try:
            await asyncio.sleep(self.pause)
        finally:
            thaw(processes)
        return Window("freeze-postgres", start, self.now(), f"{len(processes)} processes")

    async def _freeze_broker(self) -> Window:
        if self.broker is not None:
            start = self.now()
            self.broker.freeze()
            try:
                await asyncio.sleep(self.pause)
            finally:
                self.broker.thaw()
            return Window("freeze-broker", start, self.now(), "the Kafka broker")
        consumers = [role for role in self.fleet.roles if role.args[0] == "consume"]
        processes = [p for role in consumers for p in process_tree(role.pid)]
        start = self.now()
        freeze(processes)
        try:
            await asyncio.sleep(self.pause)
        finally:
            thaw(processes)
        return Window(
            "freeze-broker", start, self.now(),
            "PostgreSQL bus: every consumer process frozen (the bus has no broker)",
        )  # fmt: skip

    async def _kill_broker(self) -> Window:
        broker = self.broker
        if broker is None:
            return self._skipped("kill-broker", "no broker on the PostgreSQL bus")
        everyone = broker.node_ids()
        if len(everyone) < 3:
            return self._skipped("kill-broker", "needs a cluster of three brokers")
        try:
            victim = await asyncio.to_thread(broker.leader_of, SESSION_ENDED, 0)
        except Exception:  # no leader known (the topic not made yet): any node will do
            victim = min(everyone)
        start = self.now()
        await asyncio.to_thread(broker.kill, victim)
        await asyncio.sleep(self.pause)
        # On this (the main) thread: a node started from a worker thread would not be
        # stopped with the soak should it die.
        broker.restart(victim)
        await asyncio.to_thread(broker.wait_for_brokers, everyone, timeout=READY_TIMEOUT)
        return Window("kill-broker", start, self.now(), f"broker {victim} of {len(everyone)}")

    async def _rotate_keys(self) -> Window:
        start = self.now()
        rotation: list[float | None] = [start, None]
        self.world.rotations.append(rotation)
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "pin_sessions", "keys", "rotate", "--now", env=self.env,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        _, err = await process.communicate()
        rotation[1] = self.now()
        detail = "keys rotate --now" if process.returncode == 0 else (
            f"keys rotate --now exited {process.returncode}: {err.decode()[-300:]}"
        )  # fmt: skip
        await asyncio.sleep(KEY_CACHE_SECONDS)
        return Window("rotate-keys", start, self.now(), detail)

    async def _lock_session(self) -> Window:
        candidates = [
            device for device in self.world.devices.values()
            if device.live and device.tokens is None and not device.bot
        ]  # fmt: skip
        if not candidates or self.dsn is None:
            return self._skipped("lock-session", "no live guest device to lock")
        self.world.rng.shuffle(candidates)
        conn = await asyncpg.connect(self.dsn)
        try:
            async with conn.transaction():
                # A live device between two sessions has none to lock: the next one will.
                for device in candidates[:10]:
                    # Its calls are told apart from the moment before the lock is taken.
                    self.world.locked_device = device.anonymous_id
                    locked = await conn.fetchval(LOCK_SESSION, device.anonymous_id)
                    if locked is not None:
                        break
                else:
                    return self._skipped("lock-session", "no device had an Active session")
                start = self.now()
                await asyncio.sleep(self.pause + 3.0)
                end = self.now()
        finally:
            await conn.close()
            self.world.locked_device = None
        return Window("lock-session", start, end, f"session {locked}", strict=True)

    async def _until_ready(self, role: Role) -> None:
        await self._until(role.ready, f"{role.name} ready again")

    async def _until(self, condition: Callable[[], bool], what: str) -> None:
        deadline = self.now() + READY_TIMEOUT
        while not await asyncio.to_thread(condition):
            if self.now() > deadline:
                raise RuntimeError(f"{what}: not within {READY_TIMEOUT} s")
            await asyncio.sleep(0.1)


def _cmdline(process: Any) -> list[str]:
    try:
        return list(process.cmdline())
    except Exception:  # gone meanwhile
        return []

"""Every batch size of the delivery roles is a setting (``PIN_CONSUMERS__*``, ``PIN_RELAY__*``),
with the defaults the roles had as constants, and it reaches the role that uses it."""

from __future__ import annotations

import uuid
from collections.abc import Mapping

import pytest
from prometheus_client import CollectorRegistry

from pin_sessions.bootstrap.database import build_runtime
from pin_sessions.bootstrap.delivery import CONSUMERS, build_consumer
from pin_sessions.platform.clock import FixedClock
from pin_sessions.platform.messaging.metrics import MessagingMetrics
from pin_sessions.platform.messaging.pgbus import PostgresBusConsumer
from pin_sessions.platform.outbox import append_all
from pin_sessions.settings import SettingsError, load_settings
from tests.platform.messaging.pipeline import thing
from tests.support.runtime import unconnected_runtime

VARIABLES = (
    "PIN_CONSUMERS__BATCH_SIZE",
    "PIN_CONSUMERS__PRUNE_BATCH_SIZE",
    "PIN_CONSUMERS__ERASURE_BATCH_SIZE",
    "PIN_RELAY__BATCH_SIZE",
    "PIN_RELAY__PRUNE_BATCH_SIZE",
)


def test_the_defaults_are_the_sizes_the_roles_always_had() -> None:
    settings = load_settings({})
    consumers, relay = settings.consumers, settings.relay
    assert (consumers.batch_size, consumers.prune_batch_size) == (200, 1000)
    assert consumers.erasure_batch_size == 1000
    assert (relay.batch_size, relay.prune_batch_size) == (500, 1000)


@pytest.mark.parametrize("variable", VARIABLES)
def test_each_is_read_and_a_size_below_one_is_refused_naming_it(variable: str) -> None:
    group, name = variable.removeprefix("PIN_").lower().split("__")
    assert getattr(getattr(load_settings({variable: "7"}), group), name) == 7
    with pytest.raises(SettingsError) as caught:
        load_settings({variable: "0"})
    assert str(caught.value) == f"{variable} must be > 0"


@pytest.mark.parametrize("consumer", ["user-activity-user-erased", "dev-stats-user-erased"])
def test_the_erasure_consumers_delete_in_batches_of_their_setting(consumer: str) -> None:
    runtime = unconnected_runtime(environ={"PIN_CONSUMERS__ERASURE_BATCH_SIZE": "3"})
    handler = CONSUMERS[consumer](runtime)
    assert getattr(handler, "batch_size") == 3  # noqa: B009 - not every handler has one


async def test_the_bus_reads_as_many_messages_a_pass_as_its_setting(
    settings_env: Mapping[str, str], database_url: str, clock: FixedClock
) -> None:
    settings = load_settings({**settings_env, "PIN_CONSUMERS__BATCH_SIZE": "2"})
    runtime = build_runtime(settings, database_url, clock=clock, registry=CollectorRegistry())
    await runtime.database.open()
    try:
        async with runtime.database.transaction() as conn:
            events = [thing("pin.test.things.v1", uuid.uuid4(), seq) for seq in range(3)]
            await append_all(conn, events, now=clock.now())
        bus = build_consumer(
            runtime, "dev-stats-session-ended", MessagingMetrics.register(runtime.registry)
        )
        assert isinstance(bus, PostgresBusConsumer)

        # A full batch says more is waiting; the third row comes alone.
        assert await bus.run_once(clock.now()) is True
        assert await bus.run_once(clock.now()) is False
    finally:
        await runtime.database.close()

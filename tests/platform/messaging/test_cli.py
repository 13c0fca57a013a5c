"""``pin-sessions relay`` and ``pin-sessions consume NAME`` as real processes (SPEC §2, §7)."""

from __future__ import annotations

import asyncio
import signal

import httpx

from tests.support.processes import free_port, pin_sessions
from tests.support.waiting import wait_until


async def _metrics(port: int, sample: str) -> str:
    """The first exposition that carries ``sample``, once the process serves it.

    The endpoint serves the metric families from the start; a reader's samples appear with
    its first pass, so the wait is for the sample, not its family's HELP line.
    """
    served: list[str] = []

    async def delivery_metrics_served() -> bool:
        try:
            async with httpx.AsyncClient() as client:
                response = await client.get(f"http://127.0.0.1:{port}/metrics", timeout=1)
        except httpx.HTTPError:
            return False
        served.append(response.text)
        return sample in response.text

    await wait_until(delivery_metrics_served, timeout=60, interval=0.1)
    return served[-1]


async def test_a_consumer_serves_its_metrics_and_stops_gracefully_on_sigterm(
    settings_env: dict[str, str],
) -> None:
    port = free_port()
    process = pin_sessions(
        "consume", "dev-stats-session-ended", "--metrics-port", str(port), env=settings_env
    )
    try:
        text = await _metrics(port, 'pin_outbox_pending{reader="dev-stats-session-ended"}')
        assert 'pin_outbox_pending{reader="dev-stats-session-ended"} 0.0' in text
        assert 'pin_outbox_lag_seconds{reader="dev-stats-session-ended"} 0.0' in text
        process.send_signal(signal.SIGTERM)
        _, err = await asyncio.to_thread(process.communicate, timeout=30)
        assert process.returncode == 0, err
        assert '"event": "consumer stopped"' in err
    finally:
        process.kill()
        process.wait()


def test_the_relay_refuses_to_start_without_kafka(settings_env: dict[str, str]) -> None:
    process = pin_sessions("relay", env=settings_env)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 2
    assert "PIN_KAFKA_BOOTSTRAP_SERVERS" in err

"""Paced reads: while the event loop is busy, a stream takes its messages in fewer batches.

The loop is made busy for real (a callback that holds it a few ms, over and over), the worker is
the simulator pacing its tokens, and the client is turnout's native transport.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager

import pytest

from tests.support import eventually
from turnout.sim import SimWorker
from turnout.wire import ClientSettings, WorkerClient
from turnout.wire.loop_load import IDLE_PERIODS, SAMPLE_PERIOD_S, LoopLoad, loop_load
from turnout.workers.settings import WireSettings
from turnout.workers.wire_adapter import client_settings

from ._helpers import request

#: Each turn of a hogged loop lasts at least this long (s): well past ``BUSY_LAG_S``.
HOG_S = 0.004


@contextmanager
def hogged_loop() -> Iterator[None]:
    """Keep the running loop busy: a callback that blocks it for ``HOG_S`` runs every turn."""
    loop = asyncio.get_running_loop()
    running = True

    def hog() -> None:
        if running:
            time.sleep(HOG_S)
            loop.call_soon(hog)

    loop.call_soon(hog)
    try:
        yield
    finally:
        running = False


async def wait_until(load: LoopLoad, busy: bool, within_s: float = 10.0) -> None:
    state = "busy" if busy else "quiet"
    await eventually(
        lambda: load.is_busy() is busy, within_s, f"the loop {state}", every=SAMPLE_PERIOD_S
    )


@pytest.fixture
async def sim() -> AsyncIterator[SimWorker]:
    async with SimWorker(port=0) as worker:
        worker.knobs.delay_ms = 5.0
        yield worker


async def batches_of(client: WorkerClient, tokens: int) -> list[int]:
    """Sizes of the batches in which the client reads an answer of ``tokens`` tokens."""
    stream = client.generate(request("pace me", ignore_eos=True, max_new_tokens=tokens))
    sizes = []
    while batch := await stream.next_batch():
        sizes.append(len(batch))
    assert sum(sizes) == tokens + 1  # one token per chunk, then the complete
    return sizes


async def test_a_quiet_loop_is_not_busy() -> None:
    load = loop_load()
    for _ in range(6):
        assert not load.is_busy()
        await asyncio.sleep(SAMPLE_PERIOD_S)
    assert load.wait_s < 0.002


async def test_a_hogged_loop_is_busy_then_quiet_again() -> None:
    load = loop_load()
    with hogged_loop():
        await wait_until(load, busy=True)
    await wait_until(load, busy=False)


async def test_sampling_stops_when_nobody_asks() -> None:
    load = loop_load()
    load.is_busy()
    await asyncio.sleep(SAMPLE_PERIOD_S * (IDLE_PERIODS + 3))
    assert not load._armed


async def test_a_quiet_loop_takes_every_message_at_once(sim: SimWorker) -> None:
    async with WorkerClient(sim.url, ClientSettings(busy_read_interval_s=0.2)) as client:
        sizes = await batches_of(client, 20)
    assert len(sizes) >= 10


async def test_a_busy_loop_takes_fewer_larger_batches(sim: SimWorker) -> None:
    load = loop_load()
    with hogged_loop():
        await wait_until(load, busy=True)
        async with WorkerClient(sim.url, ClientSettings(busy_read_interval_s=0)) as client:
            unpaced = await batches_of(client, 40)
        async with WorkerClient(sim.url, ClientSettings(busy_read_interval_s=0.3)) as client:
            paced = await batches_of(client, 40)
    # The simulator shares the hogged loop: its tokens come tens of ms apart, each read alone
    # unless paced; a batch per 300 ms gathers several.
    assert len(unpaced) >= 20
    assert len(paced) <= len(unpaced) / 3


async def test_pacing_holds_back_neither_the_first_message_nor_the_end(sim: SimWorker) -> None:
    load = loop_load()
    with hogged_loop():
        await wait_until(load, busy=True)
        async with WorkerClient(sim.url, ClientSettings(busy_read_interval_s=30.0)) as client:
            started = time.monotonic()
            sizes = await batches_of(client, 20)
            took = time.monotonic() - started
    # The first message is taken at once; everything after it waits for the end of the call,
    # which wakes the reader at once (not after the 30 s interval).
    assert len(sizes) == 2
    assert took < 10.0


def test_the_wire_setting_reaches_the_client() -> None:
    assert client_settings(WireSettings()).busy_read_interval_s == 0.025
    assert client_settings(WireSettings(busy_read_interval_ms=0)).busy_read_interval_s == 0

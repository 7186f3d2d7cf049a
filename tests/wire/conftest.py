"""A simulated worker on a free loopback port and a client connected to it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from turnout.sim import SimWorker
from turnout.wire import WorkerClient


@pytest.fixture
async def sim() -> AsyncIterator[SimWorker]:
    async with SimWorker(port=0) as worker:
        yield worker


@pytest.fixture
async def client(sim: SimWorker) -> AsyncIterator[WorkerClient]:
    async with WorkerClient(sim.url) as c:
        yield c

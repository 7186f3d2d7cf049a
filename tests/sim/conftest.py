"""A simulated worker on a free loopback port and a client connected to it (every test that
uses them runs against both gRPC server transports)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from turnout.sim import SimWorker
from turnout.wire import WorkerClient


@pytest.fixture(params=["grpcio", "native"])
async def sim(request: pytest.FixtureRequest) -> AsyncIterator[SimWorker]:
    async with SimWorker(port=0, transport=request.param) as worker:
        yield worker


@pytest.fixture
async def client(sim: SimWorker) -> AsyncIterator[WorkerClient]:
    async with WorkerClient(sim.url) as c:
        yield c

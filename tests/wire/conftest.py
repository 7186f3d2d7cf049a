"""A simulated worker on a free loopback port and a client connected to it.

Every client test runs once per transport: turnout's own HTTP/2 client (``native``, the default)
and ``grpc.aio`` (``grpcio``); both must behave the same.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from turnout.sim import SimWorker
from turnout.wire import ClientSettings, WorkerClient
from turnout.wire.transport import TransportName


@pytest.fixture
async def sim() -> AsyncIterator[SimWorker]:
    async with SimWorker(port=0) as worker:
        yield worker


@pytest.fixture(params=["native", "grpcio"])
def transport(request: pytest.FixtureRequest) -> TransportName:
    name: TransportName = request.param
    return name


@pytest.fixture
async def client(sim: SimWorker, transport: TransportName) -> AsyncIterator[WorkerClient]:
    async with WorkerClient(sim.url, ClientSettings(transport=transport)) as c:
        yield c

"""End to end over the project's simulated SGLang workers (turnout.sim) on 127.0.0.1."""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import AsyncIterator

import pytest

from turnout.plugins.policies.cache_aware import CacheAwarePolicy
from turnout.plugins.policies.simple import RoundRobinPolicy
from turnout.routing.dispatch import Dispatcher
from turnout.routing.types import RoutingRequest
from turnout.sim import SimWorker
from turnout.wire import pb
from turnout.workers.breaker import CircuitState
from turnout.workers.errors import WorkerRequestError
from turnout.workers.registry import WorkerRegistry
from turnout.workers.settings import WorkerSpec
from turnout.workers.worker import WorkerState

from .conftest import fast_settings


def request(rid: str, tokens: list[int], max_new: int = 4) -> pb.GenerateRequest:
    return pb.GenerateRequest(
        request_id=rid,
        tokenized=pb.TokenizedInput(input_ids=tokens),
        sampling_params=pb.SamplingParams(max_new_tokens=max_new, temperature=0.0),
        stream=True,
    )


@pytest.fixture
async def cluster() -> AsyncIterator[tuple[list[SimWorker], WorkerRegistry]]:
    sims = [await SimWorker(served_model_name="sim").start() for _ in range(4)]
    registry = WorkerRegistry(fast_settings([WorkerSpec(url=s.url) for s in sims]))
    await registry.start()
    try:
        for worker in registry.all():
            assert await registry.wait_ready(worker.id, 5)
        yield sims, registry
    finally:
        await registry.stop()
        for sim in sims:
            await sim.stop()


async def generate(dispatcher: Dispatcher, rid: str, tokens: list[int]) -> str:
    routing = RoutingRequest(model="sim", token_ids=tuple(tokens))
    session = await dispatcher.open_stream("sim", routing, request(rid, tokens), timeout=10)
    async with session:
        responses = [r async for r in session]
    assert responses[-1].HasField("complete")
    return session.worker.id


async def test_cache_aware_conversations_stick_over_real_workers(cluster) -> None:
    _, registry = cluster
    dispatcher = Dispatcher(registry, default_policy=CacheAwarePolicy)
    rnd = random.Random(4)
    conversations = [[rnd.randrange(3, 2900) for _ in range(96)] for _ in range(12)]
    homes: dict[int, str] = {}
    for turn in range(4):
        results = await asyncio.gather(
            *(
                generate(dispatcher, f"c{c}-t{turn}", conv + [7] * (16 * turn))
                for c, conv in enumerate(conversations)
            )
        )
        for c, worker_id in enumerate(results):
            homes.setdefault(c, worker_id)
            assert worker_id == homes[c]
    assert len(set(homes.values())) == 4  # unrelated conversations spread over the fleet
    assert max(Counter(homes.values()).values()) <= 4


async def test_worker_outage_and_recovery(cluster) -> None:
    sims, registry = cluster
    dispatcher = Dispatcher(registry, default_policy=RoundRobinPolicy)
    victim = sims[2]
    victim_id = victim.url.removeprefix("grpc://")
    await victim.stop_serving()
    used = Counter([await generate(dispatcher, f"o{i}", [5, 6, 7, 8]) for i in range(20)])
    assert victim_id not in used
    assert sum(used.values()) == 20
    worker = registry.get(victim_id)
    for _ in range(200):
        if worker.state is WorkerState.UNHEALTHY:
            break
        await asyncio.sleep(0.02)
    assert worker.state is WorkerState.UNHEALTHY
    await victim.resume_serving()
    assert await registry.wait_ready(victim_id, 5)
    used = Counter([await generate(dispatcher, f"r{i}", [5, 6, 7, 8]) for i in range(8)])
    assert used[victim_id] == 2  # back in the round robin


async def test_sim_faults_retry_and_client_errors(cluster) -> None:
    sims, registry = cluster
    dispatcher = Dispatcher(registry, default_policy=RoundRobinPolicy)
    sims[0].knobs.update({"fail_status": "UNAVAILABLE"})
    for i in range(8):
        await generate(dispatcher, f"f{i}", [9, 10, 11])
    failing = registry.get(sims[0].url.removeprefix("grpc://"))
    assert failing.failures_total >= 1
    sims[0].knobs.update({"fail_status": None})
    failing.breaker.reset()
    for sim in sims:
        sim.knobs.update({"fail_status": "INVALID_ARGUMENT"})
    for i in range(15):
        with pytest.raises(WorkerRequestError) as err:
            await generate(dispatcher, f"bad{i}", [1, 2])
        assert err.value.status == 400
    assert all(w.breaker.state is CircuitState.CLOSED for w in registry.all())
    assert all(w.breaker.consecutive_failures == 0 for w in registry.all())
    assert all(w.routable for w in registry.all())

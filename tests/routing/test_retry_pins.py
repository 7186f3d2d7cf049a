"""What a retry sends the next worker: the request is pinned anew for it (its DP rank, or none;
its own ``lora_id`` for the adapter), never what was pinned for the worker that failed. Real
simulated workers over real gRPC; a policy that picks the failing worker first."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from turnout.plugins.policies.simple import RoundRobinPolicy
from turnout.routing.dispatch import Dispatcher
from turnout.routing.types import RoutingRequest
from turnout.sim import SimWorker
from turnout.wire import pb
from turnout.workers.adapters import Adapter
from turnout.workers.registry import WorkerRegistry
from turnout.workers.settings import HealthSettings, WorkerSpec

from ..wire._helpers import request
from ._cands import Prefers
from .conftest import fast_settings

MODEL = "turnout-demo"
#: Health probes (which re-read a worker's adapters) once a minute: a test sets them itself.
SLOW_PROBES = HealthSettings(interval_s=60, timeout_s=2, pending_interval_s=0.05)


@pytest.fixture
async def cluster() -> AsyncIterator[Callable[..., Any]]:
    """``make(bad, good)``: start both sims and a registry of them; the bad one fails every
    Generate before its first response."""
    sims: list[SimWorker] = []
    registries: list[WorkerRegistry] = []

    async def make(bad: SimWorker, good: SimWorker) -> tuple[WorkerRegistry, str]:
        for sim in (bad, good):
            sims.append(await sim.start())
        bad.knobs.update({"fail_status": "UNAVAILABLE"})
        specs = [WorkerSpec(url=s.url) for s in (bad, good)]
        registry = WorkerRegistry(fast_settings(specs, health=SLOW_PROBES))
        registries.append(registry)
        await registry.start()
        for worker in registry.all():
            assert await registry.wait_ready(worker.id, 10), worker.info()
        return registry, bad.url.removeprefix("grpc://")

    yield make
    for registry in registries:
        await registry.stop()
    for sim in sims:
        await sim.stop()


async def run(
    registry: WorkerRegistry, bad_id: str, req: pb.GenerateRequest, adapter: str | None = None
) -> str:
    """Send ``req`` to the end; the id of the worker that served it."""
    dispatcher = Dispatcher(registry, {MODEL: Prefers(bad_id)}, default_policy=RoundRobinPolicy)
    routing = RoutingRequest(MODEL, tuple(req.tokenized.input_ids), adapter=adapter)
    session = await dispatcher.open_stream(MODEL, routing, req, timeout=30)
    async with session:
        responses = [r async for r in session]
    assert responses[-1].HasField("complete")
    assert session.attempts == 2
    return session.worker.id


def sent_to(sim: SimWorker, rid: str) -> pb.GenerateRequest:
    [sent] = [r for r in sim.requests if r.request_id == rid]
    return sent


async def test_a_retry_on_a_worker_without_ranks_carries_no_rank(cluster) -> None:
    bad, good = SimWorker(port=0, dp_size=4), SimWorker(port=0)
    registry, bad_id = await cluster(bad, good)
    req = request("ranks", request_id="rank-retry", max_new_tokens=4)
    assert await run(registry, bad_id, req) == good.url.removeprefix("grpc://")
    assert sent_to(bad, "rank-retry").data_parallel_rank == 3  # pinned for the failed rank
    assert not sent_to(good, "rank-retry").HasField("data_parallel_rank")


@pytest.mark.parametrize("good_reports_its_id", [True, False])
async def test_a_retry_names_the_adapter_by_the_next_workers_id(
    cluster, good_reports_its_id: bool
) -> None:
    """Each worker minted its own ``lora_id``. A worker that did not report its id for the
    adapter gets the id the request came with (the configured one), not the failed worker's."""
    bad = SimWorker(port=0, lora_adapters=["sql"])
    good = SimWorker(port=0, lora_adapters=["sql"])
    registry, bad_id = await cluster(bad, good)
    good_lora_id = good.servicer.adapters.by_name["sql"].lora_id
    given = "sql"
    if not good_reports_its_id:  # it named its adapters only (older SGLang's lora_paths)
        good_worker = registry.get(good.url.removeprefix("grpc://"))
        assert good_worker is not None
        good_worker.adapters = {"sql": Adapter("sql")}
        given = good_lora_id  # configured for it
    req = request("adapters", request_id="lora-retry", max_new_tokens=4)
    req.lora_id = given
    await run(registry, bad_id, req, adapter="sql")
    assert bad.records.lora_ids["lora-retry"] == bad.servicer.adapters.by_name["sql"].lora_id
    assert good.records.lora_ids["lora-retry"] == good_lora_id

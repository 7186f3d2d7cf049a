"""Data-parallel-aware routing over simulated SGLang workers with ``--dp-size 4`` (real processes,
real gRPC): each (worker, rank) is a candidate and the chosen rank is pinned on the request."""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import AsyncIterator, Callable

import pytest

from turnout.plugins.policies.cache_aware import CacheAwarePolicy
from turnout.plugins.policies.hashing import ConsistentHashingPolicy, PrefixHashPolicy
from turnout.plugins.policies.load import LeastLoadPolicy, PowerOfTwoPolicy
from turnout.plugins.policies.manual import ManualPolicy
from turnout.plugins.policies.simple import RandomPolicy, RoundRobinPolicy
from turnout.routing.dispatch import Dispatcher
from turnout.routing.session import WorkerSession
from turnout.routing.types import Policy, RoutingRequest
from turnout.sim import SimProcess, get_records, set_knobs
from turnout.wire import WorkerClient, pb
from turnout.workers.dp import DpRank
from turnout.workers.registry import WorkerRegistry
from turnout.workers.settings import BreakerSettings, HealthSettings, WorkerSpec
from turnout.workers.wire_adapter import loads_by_rank
from turnout.workers.worker import Worker

from .conftest import fast_settings

MODEL = "turnout-demo"


def request(rid: str, tokens: list[int], max_new: int = 2) -> pb.GenerateRequest:
    return pb.GenerateRequest(
        request_id=rid,
        tokenized=pb.TokenizedInput(input_ids=tokens),
        sampling_params=pb.SamplingParams(max_new_tokens=max_new, temperature=0.0, ignore_eos=True),
        stream=True,
    )


@pytest.fixture
async def dp_sims() -> AsyncIterator[Callable[..., object]]:
    started: list[SimProcess] = []

    async def make(count: int = 1, *args: str) -> list[SimProcess]:
        new = [await SimProcess("--dp-size", "4", *args).__aenter__() for _ in range(count)]
        started.extend(new)
        return new

    yield make
    await asyncio.gather(*(asyncio.to_thread(sim.stop) for sim in started))


@pytest.fixture
async def registry_of() -> AsyncIterator[Callable[..., object]]:
    made: list[WorkerRegistry] = []

    async def make(specs: list[WorkerSpec]) -> WorkerRegistry:
        registry = WorkerRegistry(fast_settings(specs))
        made.append(registry)
        await registry.start()
        for worker in registry.all():
            assert await registry.wait_ready(worker.id, 10), worker.info()
        return registry

    yield make
    for registry in made:
        await registry.stop()


async def open_one(
    dispatcher: Dispatcher, rid: str, tokens: list[int], max_new: int = 2, key: str | None = None
) -> WorkerSession:
    routing = RoutingRequest(model=MODEL, token_ids=tuple(tokens), routing_key=key)
    return await dispatcher.open_stream(MODEL, routing, request(rid, tokens, max_new), timeout=60)


async def run_one(
    dispatcher: Dispatcher, rid: str, tokens: list[int], max_new: int = 2, key: str | None = None
) -> str:
    """Send one request to the end; returns the candidate id it went to."""
    session = await open_one(dispatcher, rid, tokens, max_new, key)
    async with session:
        responses = [r async for r in session]
    assert responses[-1].HasField("complete")
    return session.slot.id


async def test_a_dp_worker_offers_one_candidate_per_rank(dp_sims, registry_of) -> None:
    (sim,) = await dp_sims(1)
    registry = await registry_of([WorkerSpec(url=sim.url)])
    (worker,) = registry.all()
    assert worker.dp_size == 4
    assert worker.labels["dp_size"] == "4"
    candidates = registry.candidates(MODEL)
    assert [c.id for c in candidates] == [f"{worker.id}@{r}" for r in range(4)]
    assert all(isinstance(c, DpRank) and c.worker is worker for c in candidates)
    assert [r["rank"] for r in worker.info()["dp_ranks"]] == [0, 1, 2, 3]
    ring = ConsistentHashingPolicy()
    Dispatcher(registry, policies={MODEL: ring}, default_policy=RoundRobinPolicy)
    assert ring._ring.members == {c.id for c in candidates}  # policies learn the ranks
    # Every request carries the rank the router chose, and the sim serves it on that rank.
    dispatcher = Dispatcher(registry, default_policy=RoundRobinPolicy)
    chosen = [await run_one(dispatcher, f"rr{i}", [5, 6, 7]) for i in range(8)]
    records = await get_records(sim.url)
    assert [records["ranks"][f"rr{i}"] for i in range(8)] == [int(c[-1]) for c in chosen]
    assert [s["requests"] for s in records["rank_stats"]] == [2, 2, 2, 2]
    assert worker.in_flight == 0
    assert all(r.in_flight == 0 for r in worker.ranks)


async def test_long_requests_spread_over_ranks_instead_of_queueing_on_one(
    dp_sims, registry_of
) -> None:
    """Every 4th request is long. Left to itself, the worker's round robin puts each long one on
    the same rank; routed per rank by load, each lands on a rank with nothing running."""
    (sim,) = await dp_sims(1, "--delay-ms", "5")
    registry = await registry_of([WorkerSpec(url=sim.url)])
    dispatcher = Dispatcher(registry, default_policy=LeastLoadPolicy)
    long_ones: list[WorkerSession] = []
    try:
        for turn in range(4):
            # Long enough to outlast the whole sequence even on a busy machine (closed below).
            long_ones.append(await open_one(dispatcher, f"long{turn}", [9, 9, 9], max_new=4000))
            for i in range(3):
                await run_one(dispatcher, f"short{turn}-{i}", [3, 4, 5])
        records = await get_records(sim.url)
        long_ranks = [records["ranks"][f"long{turn}"] for turn in range(4)]
        # Routed as a whole, all four share one rank. Per rank, each goes where least runs; a
        # GetLoads report taken while a short request still ran can make one rank look busy for
        # a poll interval (50 ms), which on a loaded machine may tie it with a long one's rank.
        assert len(set(long_ranks)) >= 3, long_ranks
        assert [s.slot.dp_rank for s in long_ones] == long_ranks
        assert [s["peak_waiting"] for s in records["rank_stats"]] == [0, 0, 0, 0]
    finally:
        for session in long_ones:
            await session.aclose()


async def test_reported_rank_loads_steer_requests_away(dp_sims, registry_of) -> None:
    """Work another client put on rank 2 (seen only through GetLoads) keeps new requests off it."""
    (sim,) = await dp_sims(1, "--delay-ms", "5")
    registry = await registry_of([WorkerSpec(url=sim.url)])
    (worker,) = registry.all()
    async with WorkerClient(sim.url) as other:
        busy = []
        for i in range(3):
            req = request(f"other{i}", [1, 2, 3], max_new=4000)
            req.data_parallel_rank = 2
            stream = other.generate(req)
            await anext(stream)
            busy.append(stream)
        try:
            for _ in range(250):  # the load monitor polls every 50 ms
                if worker.ranks[2].load >= 3:
                    break
                await asyncio.sleep(0.02)
            assert [r.load for r in worker.ranks] == [0, 0, 3, 0]
            assert worker.load == 3
            dispatcher = Dispatcher(registry, default_policy=LeastLoadPolicy)
            chosen = [await run_one(dispatcher, f"n{i}", [4, 5, 6]) for i in range(9)]
            assert set(Counter(c[-1] for c in chosen)) == {"0", "1", "3"}  # never rank 2
        finally:
            for stream in busy:
                await stream.aclose()


async def test_cache_aware_keeps_a_conversation_on_its_rank(dp_sims, registry_of) -> None:
    sims = await dp_sims(2)
    registry = await registry_of([WorkerSpec(url=s.url) for s in sims])
    dispatcher = Dispatcher(registry, default_policy=CacheAwarePolicy)
    rnd = random.Random(7)
    conversations = [[rnd.randrange(3, 2900) for _ in range(96)] for _ in range(24)]
    homes: dict[int, str] = {}
    for turn in range(3):
        for c, conv in enumerate(conversations):
            home = await run_one(dispatcher, f"c{c}-t{turn}", conv + [7] * (16 * turn))
            assert homes.setdefault(c, home) == home
    # Unrelated conversations spread over the 8 ranks as their first blocks hash (idle ranks:
    # rendezvous hashing, the same in every process; 5 ranks or fewer: odds below 1e-3).
    assert len(set(homes.values())) >= 6
    # The sims agree: each later turn ran on the rank that had the conversation's prefix.
    records = {s.url.removeprefix("grpc://"): await get_records(s.url) for s in sims}
    for c, home in homes.items():
        worker_id, rank = home.rsplit("@", 1)
        ranks = records[worker_id]["ranks"]
        assert [ranks[f"c{c}-t{t}"] for t in range(3)] == [int(rank)] * 3


@pytest.mark.parametrize(
    "policy",
    [
        RoundRobinPolicy,
        RandomPolicy,
        PowerOfTwoPolicy,
        ConsistentHashingPolicy,
        ManualPolicy,
        PrefixHashPolicy,
    ],
)
async def test_every_policy_routes_over_dp_workers(
    dp_sims, registry_of, policy: Callable[[], Policy]
) -> None:
    sims = await dp_sims(2)
    registry = await registry_of([WorkerSpec(url=s.url) for s in sims])
    dispatcher = Dispatcher(registry, default_policy=policy)
    keyed: dict[str, set[str]] = {}
    used: Counter[str] = Counter()
    for i in range(16):
        key = f"user-{i % 4}"
        home = await run_one(dispatcher, f"p{i}", [10 + i % 4] * 20, key=key)
        keyed.setdefault(key, set()).add(home)
        used[home] += 1
    assert sum(used.values()) == 16
    if policy in (ConsistentHashingPolicy, ManualPolicy, PrefixHashPolicy):
        assert all(len(homes) == 1 for homes in keyed.values())  # a key stays on its rank
    if policy is RoundRobinPolicy:
        assert set(used.values()) == {2}  # the 8 ranks in turn
        assert len(used) == 8
    served = [sum(s["requests"] for s in (await get_records(s.url))["rank_stats"]) for s in sims]
    assert sum(served) == 16


async def test_dp_size_one_in_the_config_routes_to_the_worker_as_a_whole(
    dp_sims, registry_of
) -> None:
    (sim,) = await dp_sims(1)
    registry = await registry_of([WorkerSpec(url=sim.url, dp_size=1)])
    (worker,) = registry.all()
    assert worker.dp_size == 1
    assert registry.candidates(MODEL) == [worker]
    dispatcher = Dispatcher(registry, default_policy=LeastLoadPolicy)
    for i in range(4):
        assert await run_one(dispatcher, f"w{i}", [1, 2]) == worker.id
    records = await get_records(sim.url)
    assert [records["ranks"][f"w{i}"] for i in range(4)] == [0, 1, 2, 3]  # its own round robin


async def test_a_failing_dp_worker_is_retried_on_another_worker(dp_sims, registry_of) -> None:
    bad, good = await dp_sims(2)
    registry = await registry_of([WorkerSpec(url=s.url) for s in (bad, good)])
    await set_knobs(bad.url, fail_status="UNAVAILABLE")
    dispatcher = Dispatcher(registry, default_policy=RoundRobinPolicy)
    bad_id = bad.url.removeprefix("grpc://")
    for i in range(8):  # the 8 ranks in turn: 4 of them are the failing worker's
        home = await run_one(dispatcher, f"f{i}", [1, 2, 3])
        assert not home.startswith(bad_id + "@")
    failed = registry.get(bad_id)
    assert failed is not None
    assert failed.failures_total >= 1
    assert failed.in_flight == 0
    assert all(r.in_flight == 0 for r in failed.ranks)


def test_loads_by_rank_reads_each_rank() -> None:
    loads = pb.GetLoadsResponse(
        dp_rank_count=4,
        loads=[
            pb.SchedulerLoad(dp_rank=2, num_running_reqs=3, num_waiting_reqs=1),
            pb.SchedulerLoad(dp_rank=0, num_running_reqs=1),
            pb.SchedulerLoad(dp_rank=9, num_running_reqs=5),  # out of range: ignored
        ],
    )
    assert loads_by_rank(loads) == [1, 0, 4, 0]
    single = pb.GetLoadsResponse(loads=[pb.SchedulerLoad(num_running_reqs=2, num_waiting_reqs=3)])
    assert loads_by_rank(single) == [5]


def test_reported_loads_by_rank_exclude_our_own_requests() -> None:
    worker = Worker(WorkerSpec(url="grpc://10.0.0.1:30000", dp_size=2), None, *_defaults())  # type: ignore[arg-type]
    first, second = worker.ranks
    first.acquire()
    worker.set_reported_load([3, 1])
    assert (first.load, second.load, worker.load) == (3, 1, 4)
    first.release()
    assert (first.in_flight, worker.in_flight) == (0, 0)
    worker.set_reported_load([5])  # the worker changed shape: counted for it as a whole
    assert worker.load == 5
    assert not worker.apply_discovery({"dp_size": "8"})  # the config's dp_size wins
    assert worker.dp_size == 2


def _defaults() -> tuple[HealthSettings, BreakerSettings]:
    return HealthSettings(), BreakerSettings()

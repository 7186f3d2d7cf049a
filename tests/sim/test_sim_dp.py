"""The simulator's data-parallel ranks (``--dp-size``): per-rank queues, loads and pinning."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
import pytest

from turnout.sim import SimProcess, SimWorker, get_counters, get_records
from turnout.wire import WorkerCallError, WorkerClient, pb

from ..wire._helpers import fold, request


@pytest.fixture
async def dp4() -> AsyncIterator[tuple[SimWorker, WorkerClient]]:
    async with SimWorker(port=0, dp_size=4) as sim, WorkerClient(sim.url) as client:
        yield sim, client


def pinned(rid: str, rank: int | None, **sampling: object) -> pb.GenerateRequest:
    req = request("hello ranks", request_id=rid, **sampling)
    if rank is not None:
        req.data_parallel_rank = rank
    return req


async def test_server_info_and_loads_report_every_rank(dp4) -> None:
    _, client = dp4
    info = await client.get_server_info()
    assert info.server_args["dp_size"] == 4
    assert info.server_args["enable_dp_attention"] is True
    loads = await client.get_loads()
    assert loads.dp_rank_count == 4
    assert [x.dp_rank for x in loads.loads] == [0, 1, 2, 3]
    only = await client.get_loads(dp_rank=2)
    assert [x.dp_rank for x in only.loads] == [2]
    assert only.dp_rank_count == 4
    with pytest.raises(WorkerCallError) as info_err:
        await client.get_loads(dp_rank=4)
    assert info_err.value.code == grpc.StatusCode.INVALID_ARGUMENT


async def test_unpinned_requests_take_turns_and_pins_are_obeyed(dp4) -> None:
    sim, client = dp4
    for i in range(8):
        await fold(client.generate(pinned(f"rr{i}", None, max_new_tokens=2)))
    assert [sim.records.ranks[f"rr{i}"] for i in range(8)] == [0, 1, 2, 3, 0, 1, 2, 3]
    # Rank 0 is a pin too (the field has presence), and -1 means "no pin".
    for i, rank in enumerate([0, 0, 3, 2, -1]):
        await fold(client.generate(pinned(f"p{i}", rank, max_new_tokens=2)))
    assert [sim.records.ranks[f"p{i}"] for i in range(5)] == [0, 0, 3, 2, 0]
    assert [s["requests"] for s in sim.rank_stats] == [5, 2, 3, 3]


async def test_a_rank_that_does_not_exist_is_a_client_error(dp4) -> None:
    sim, client = dp4
    with pytest.raises(WorkerCallError) as info:
        await fold(client.generate(pinned("far", 4)))
    assert info.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "data_parallel_rank 4" in info.value.message
    assert sim.records.outcomes["far"] == "error"


async def test_each_rank_has_its_own_queue_and_load(dp4) -> None:
    sim, client = dp4
    sim.knobs.update({"delay_ms": 20, "max_running": 1})
    streams = [client.generate(pinned(f"q{i}", 1, max_new_tokens=40)) for i in range(3)]
    other = client.generate(pinned("q-other", 3, max_new_tokens=40))
    for stream in (*streams[:1], other):
        await anext(stream)
    for _ in range(100):  # the two queued requests reach rank 1 soon after
        loads = await client.get_loads(["all"])
        if loads.loads[1].num_waiting_reqs == 2:
            break
        await asyncio.sleep(0.02)
    by_rank = {x.dp_rank: (x.num_running_reqs, x.num_waiting_reqs) for x in loads.loads}
    assert by_rank == {0: (0, 0), 1: (1, 2), 2: (0, 0), 3: (1, 0)}
    assert loads.aggregate.total_running_reqs == 2
    assert loads.aggregate.total_waiting_reqs == 2
    assert loads.loads[1].queues.waiting == 2
    for stream in (*streams, other):
        await stream.aclose()
    assert sim.rank_stats[1]["peak_waiting"] == 2


async def test_prefix_cache_is_per_rank(dp4) -> None:
    _, client = dp4
    prompt = " ".join(["cache"] * 40)
    first = await fold(client.generate(_with_rank(request(prompt, request_id="c1"), 0)))
    same = await fold(client.generate(_with_rank(request(prompt, request_id="c2"), 0)))
    other = await fold(client.generate(_with_rank(request(prompt, request_id="c3"), 1)))
    assert first.completes[0].cached_tokens == 0
    assert same.completes[0].cached_tokens > 0
    assert other.completes[0].cached_tokens == 0


def _with_rank(req: pb.GenerateRequest, rank: int) -> pb.GenerateRequest:
    req.data_parallel_rank = rank
    return req


async def test_subprocess_dp_ranks_show_in_records() -> None:
    async with SimProcess("--dp-size", "4") as proc, WorkerClient(proc.url) as client:
        for i in range(6):
            await fold(client.generate(pinned(f"s{i}", 2 if i < 2 else None, max_new_tokens=2)))
        records = await get_records(proc.url)
        counters = await get_counters(proc.url)
    assert records["dp_size"] == 4
    assert records["role"] == "regular"
    ranks = records["ranks"]
    assert [ranks[f"s{i}"] for i in range(6)] == [2, 2, 0, 1, 2, 3]
    assert [s["requests"] for s in records["rank_stats"]] == [1, 1, 3, 1]
    assert counters["ranks"] == records["rank_stats"]  # the cheap call has them too

"""The simulator's ``SubscribeKvEvents`` over real gRPC (both server transports): stored and
removed blocks, resume and expiry, flush, DP ranks, load records and heartbeats."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from turnout.sim import SimWorker
from turnout.sim.kv_cache import block_hashes
from turnout.wire import (
    WorkerCallError,
    WorkerClient,
    build_generate_request,
    build_sampling_params,
    pb,
)
from turnout.wire.proto import common_pb2

from ..wire._helpers import fold

pytestmark = pytest.mark.parametrize("transport", ["grpcio", "native"])


def _blocks(*values: int) -> list[int]:
    return [v for v in values for _ in range(16)]


def _request(ids: list[int], rid: str, **extra: Any) -> pb.GenerateRequest:
    req = build_generate_request(
        request_id=rid,
        input_ids=ids,
        sampling_params=build_sampling_params(max_new_tokens=2),
    )
    for key, value in extra.items():
        setattr(req, key, value)
    return req


async def _subscribed(client: WorkerClient, start: int = 0) -> Any:
    """A subscription the sim has answered (its first record read)."""
    events = client.subscribe_kv_events(start, load_records_before_first_batch=True)
    async with asyncio.timeout(5):
        await anext(events)
    return events


async def _next(stream: AsyncIterator[common_pb2.KvEventBatch]) -> common_pb2.KvEventBatch:
    """The next batch that is not a load-only record."""
    async with asyncio.timeout(5):
        while True:
            batch = await anext(stream)
            if not batch.load.load_only:
                return batch


async def test_stores_and_evictions_stream_as_numbered_batches(transport: str) -> None:
    async with (
        SimWorker(port=0, transport=transport, kv_cache_tokens=64) as sim,
        WorkerClient(sim.url) as client,
    ):
        events = await _subscribed(client)
        first = [*_blocks(1, 2, 3), 9]
        await fold(client.generate(_request(first, "a")))
        batch = await _next(events)
        assert batch.sequence_number == 1
        assert batch.dp_rank == 0
        (event,) = batch.events
        stored = event.stored
        assert not stored.HasField("parent_block_hash")
        assert [list(b.token_ids) for b in stored.blocks] == [_blocks(v) for v in (1, 2, 3)]
        assert [b.block_hash for b in stored.blocks] == block_hashes(first, 16)
        assert {b.block_size for b in stored.blocks} == {16}
        assert batch.load.HasField("waiting_uncached_tokens")
        assert 3 / 4 <= batch.load.token_usage < 1  # 3 of 4 blocks, and the running tail
        # 4 blocks of room: two more blocks of another prefix evict the idle leaves first.
        await fold(client.generate(_request([*_blocks(5, 6), 9], "b")))
        batch = await _next(events)
        removed, stored_again = batch.events
        assert batch.sequence_number == 2
        assert list(removed.removed.block_hashes) == [block_hashes(first, 16)[2]]
        assert [list(b.token_ids) for b in stored_again.stored.blocks] == [
            _blocks(5),
            _blocks(6),
        ]
        await events.aclose()
    assert sim.records.kv_subscriptions == [0]


async def test_a_subscriber_resumes_after_its_cursor_and_an_expired_one_is_refused(
    transport: str,
) -> None:
    async with (
        SimWorker(port=0, transport=transport, kv_events_keep=3) as sim,
        WorkerClient(sim.url) as client,
    ):
        for i in range(5):  # 5 batches: the ring keeps 3, 4 and 5
            await fold(client.generate(_request([*_blocks(10 + i), 9], f"r{i}")))
        resumed = client.subscribe_kv_events(2)
        assert [(await _next(resumed)).sequence_number for _ in range(3)] == [3, 4, 5]
        await fold(client.generate(_request([*_blocks(20), 9], "live")))
        assert (await _next(resumed)).sequence_number == 6  # then live, without a gap
        await resumed.aclose()
        with pytest.raises(WorkerCallError) as refused:
            await anext(client.subscribe_kv_events(1))
    assert refused.value.code == grpc.StatusCode.OUT_OF_RANGE
    assert sim.records.kv_subscriptions == [2]


async def test_a_subscriber_from_0_gets_the_state_as_a_snapshot_then_live(
    transport: str,
) -> None:
    async with (
        SimWorker(port=0, transport=transport, dp_size=2, kv_events_keep=2) as sim,
        WorkerClient(sim.url) as client,
    ):
        for i in range(4):  # 4 batches, 2 per rank: the ring kept the last 2 only
            prompt = [*_blocks(30 + i, 40 + i), 9]
            await fold(client.generate(_request(prompt, f"s{i}", data_parallel_rank=i % 2)))
        events = client.subscribe_kv_events()
        chunks = [await _next(events), await _next(events)]
        await fold(client.generate(_request([*_blocks(50), 9], "live", data_parallel_rank=0)))
        live = await _next(events)
        await events.aclose()
    assert [(c.sequence_number, c.dp_rank) for c in chunks] == [(3, 0), (4, 1)]
    assert [(c.snapshot.index, c.snapshot.count, c.snapshot.blocks) for c in chunks] == [
        (0, 2, 8),
        (1, 2, 8),
    ]
    for chunk in chunks:
        assert chunk.events[0].HasField("cleared")
        stored = [e.stored for e in chunk.events[1:]]
        known: set[int] = set()
        for event in stored:  # each event one chain, parents first
            assert not event.HasField("parent_block_hash") or event.parent_block_hash in known
            known.update(b.block_hash for b in event.blocks)
        assert len(known) == 4  # 2 prompts of 2 blocks on each rank
        assert chunk.load.HasField("cache_hit_rate")
    assert (live.sequence_number, live.dp_rank) == (5, 0)
    assert not live.HasField("snapshot")


async def test_flush_cache_clears_and_streams_cleared(transport: str) -> None:
    async with SimWorker(port=0, transport=transport) as sim, WorkerClient(sim.url) as client:
        prompt = [*_blocks(1, 2), 9]
        await fold(client.generate(_request(prompt, "a")))
        events = client.subscribe_kv_events()
        assert (await _next(events)).HasField("snapshot")  # the current state first
        assert (await client.flush_cache()).success
        batch = await _next(events)
        assert batch.events[0].HasField("cleared")
        answer = await fold(client.generate(_request(prompt, "b")))
        assert answer.completes[0].cached_tokens == 0
        await events.aclose()


async def test_each_rank_streams_its_own_blocks_under_one_numbering(transport: str) -> None:
    async with (
        SimWorker(port=0, transport=transport, dp_size=2, lora_adapters=["sql"]) as sim,
        WorkerClient(sim.url) as client,
    ):
        events = await _subscribed(client)
        lora_id = sim.servicer.adapters.by_name["sql"].lora_id
        prompt = [*_blocks(1), 9]
        await fold(client.generate(_request(prompt, "r0", data_parallel_rank=0)))
        await fold(client.generate(_request(prompt, "r1", data_parallel_rank=1, lora_id=lora_id)))
        zero, one = await _next(events), await _next(events)
        await events.aclose()
    assert (zero.sequence_number, zero.dp_rank) == (1, 0)
    assert (one.sequence_number, one.dp_rank) == (2, 1)
    assert not zero.events[0].stored.HasField("lora_name")
    assert one.events[0].stored.lora_name == "sql"
    assert one.events[0].stored.blocks[0].block_hash == block_hashes(prompt, 16, "sql")[0]


async def test_idle_heartbeats_and_a_hung_engine_shows_its_silence(transport: str) -> None:
    async with SimWorker(port=0, transport=transport) as sim, WorkerClient(sim.url) as client:
        events = client.subscribe_kv_events(load_records_before_first_batch=True)
        async with asyncio.timeout(3):
            idle = await anext(events)
        assert idle.load.load_only
        assert idle.sequence_number == 0
        assert not idle.load.HasField("engine_silence_ms")
        sim.knobs.hang = True
        prompt = [*_blocks(1, 2), 9]
        hung = client.generate(_request(prompt, "hung"))
        hung_task = asyncio.create_task(anext(hung))
        silences = []
        async with asyncio.timeout(5):
            while len(silences) < 3:
                batch = await anext(events)
                if batch.load.HasField("engine_silence_ms"):
                    silences.append(batch.load.engine_silence_ms)
                    assert batch.load.prefill_pending_tokens == len(prompt)
                    assert batch.load.running_requests == 1
        assert silences[-1] >= 900  # a heartbeat a second, the silence growing
        assert silences == sorted(silences)
        hung_task.cancel()
        await asyncio.gather(hung_task, return_exceptions=True)
        await hung.aclose()
        await events.aclose()


async def test_without_a_cache_there_are_no_events(transport: str) -> None:
    async with (
        SimWorker(port=0, transport=transport, kv_cache_tokens=0) as sim,
        WorkerClient(sim.url) as client,
    ):
        with pytest.raises(WorkerCallError) as refused:
            await anext(client.subscribe_kv_events())
    assert refused.value.code == grpc.StatusCode.UNIMPLEMENTED

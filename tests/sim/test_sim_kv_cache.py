"""The simulator's block prefix cache: hits, eviction, the LoRA namespace, prefill time per
uncached token and the loads it reports; the cache itself, and its event log, directly."""

from __future__ import annotations

import asyncio
import time

from turnout.sim import SimWorker
from turnout.sim.kv_cache import (
    BlocksRemoved,
    BlocksStored,
    CacheCleared,
    KvCache,
    KvEventLog,
    StoredBlock,
    block_hashes,
)
from turnout.wire import WorkerClient, build_generate_request, build_sampling_params, pb

from ..wire._helpers import fold


def _ids(*blocks: int, size: int = 4) -> list[int]:
    """A prompt of whole blocks: block ``b`` is ``size`` copies of token ``b``."""
    return [b for b in blocks for _ in range(size)]


def _request(ids: list[int], rid: str, lora_id: str = "", **sampling: object) -> pb.GenerateRequest:
    sampling.setdefault("max_new_tokens", 4)
    req = build_generate_request(
        request_id=rid,
        input_ids=ids,
        sampling_params=build_sampling_params(**sampling),  # type: ignore[arg-type]
        stream=True,
    )
    if lora_id:
        req.lora_id = lora_id
    return req


async def _cached(client: WorkerClient, ids: list[int], rid: str, lora_id: str = "") -> int:
    answer = await fold(client.generate(_request(ids, rid, lora_id)))
    return answer.completes[0].cached_tokens


# -- the cache and its log ------------------------------------------------------------------------


def test_block_hashes_chain_over_the_prefix_and_the_adapter() -> None:
    a = block_hashes(_ids(1, 2, 3), 4)
    b = block_hashes(_ids(9, 2, 3), 4)
    assert len(a) == 3
    assert len(block_hashes([*_ids(1, 2, 3), 7, 7], 4)) == 3
    assert a[1:] != b[1:]  # same tokens after another parent: other blocks
    assert block_hashes(_ids(1, 2, 3), 4, "sql") != a
    assert block_hashes(_ids(1, 2, 3), 4) == a  # deterministic across calls and processes


def test_lookup_leaves_the_last_token_to_compute() -> None:
    cache = KvCache(4, 64, KvEventLog())
    prompt = _ids(1, 2)
    holding, cached = cache.hold(prompt, block_hashes(prompt, 4), None)
    cache.release(holding)
    assert cached == 0
    _, again = cache.hold(prompt, block_hashes(prompt, 4), None)
    assert again == 4  # 8 tokens all cached, but the last block is recomputed
    longer = [*prompt, 5]
    _, more = cache.hold(longer, block_hashes(longer, 4), None)
    assert more == 8


def test_lru_evicts_idle_leaves_first_and_never_referenced_blocks() -> None:
    log = KvEventLog()
    cache = KvCache(4, 16, log)  # 4 blocks
    old = [*_ids(1, 2), 0]
    held = [*_ids(3, 4), 0]
    h_old, _ = cache.hold(old, block_hashes(old, 4), None)
    cache.release(h_old)
    h_held, _ = cache.hold(held, block_hashes(held, 4), None)  # referenced: never evicted
    assert cache.used_blocks == 4
    assert cache.usage == 1.0
    new = [*_ids(5), 0]
    h_new, _ = cache.hold(new, block_hashes(new, 4), None)
    batch = log.since(2)[0]
    removed, stored = batch.events
    assert isinstance(removed, BlocksRemoved)
    assert isinstance(stored, BlocksStored)
    assert removed.block_hashes == (block_hashes(old, 4)[1],)  # the leaf, not its parent
    assert stored.parent_block_hash is None
    assert stored.blocks[0].token_ids == (5, 5, 5, 5)
    # Full of referenced blocks and one idle parent... whose leaf went: the parent goes next.
    other = [*_ids(6), 0]
    cache.hold(other, block_hashes(other, 4), None)
    assert log.since(3)[0].events[0] == BlocksRemoved(5, (block_hashes(old, 4)[0],))
    # Nothing idle: the next store does not fit, and no referenced block is dropped.
    last = [*_ids(7), 0]
    _, cached = cache.hold(last, block_hashes(last, 4), None)
    assert cached == 0
    assert cache.used_blocks == 4
    assert log.last_sequence == 4
    assert cache.peek(block_hashes(held, 4)) == 8
    cache.release(h_held)
    cache.release(h_new)


def test_flush_clears_and_voids_older_holdings() -> None:
    log = KvEventLog()
    cache = KvCache(4, 64, log)
    prompt = [*_ids(1, 2), 0]
    holding, _ = cache.hold(prompt, block_hashes(prompt, 4), None)
    cache.flush()
    assert cache.used_blocks == 0
    assert isinstance(log.since(1)[0].events[0], CacheCleared)
    again, _ = cache.hold(prompt, block_hashes(prompt, 4), None)
    cache.release(holding)  # from before the flush: it must not drop the new references
    cache.extend(holding, [*prompt, 1, 1, 1, 1])
    assert cache.used_blocks == 2
    assert log.last_sequence == 3
    cache.release(again)


def test_event_log_is_a_ring_with_detectable_expiry() -> None:
    log = KvEventLog(keep=3)
    for i in range(5):
        log.append([CacheCleared(i + 1)])
    assert [b.sequence_number for b in log.since(0)] == [3, 4, 5]
    assert [b.sequence_number for b in log.since(3)] == [4, 5]
    assert log.since(5) == []
    assert not log.expired(0)
    assert not log.expired(2)
    assert not log.expired(5)
    assert log.expired(1)  # batch 2 fell out
    assert log.expired(6)  # never sent


def test_event_log_keeps_a_bounded_number_of_blocks() -> None:
    log = KvEventLog(keep=100, keep_blocks=4)
    chain = (StoredBlock(1, (1,)), StoredBlock(2, (2,)), StoredBlock(3, (3,)))
    for i in range(3):
        log.append([BlocksStored(i + 1, None, chain, 1, None)])
    assert [b.sequence_number for b in log.since(0)] == [3]  # 9 blocks > 4: the newest stays
    assert log.expired(1)


# -- over gRPC ------------------------------------------------------------------------------------


async def test_cached_tokens_follow_the_cache_and_its_evictions() -> None:
    async with SimWorker(port=0, kv_cache_tokens=128) as sim, WorkerClient(sim.url) as client:
        first = [*_ids(*range(10, 14), size=16), 5]  # 4 blocks + 1 token
        assert await _cached(client, first, "a1") == 0
        assert await _cached(client, first, "a2") == 64
        # 8 blocks of room: a prompt of 6 other blocks evicts the idle ones least recently used.
        other = [*_ids(*range(20, 26), size=16), 5]
        assert await _cached(client, other, "b1") == 0
        assert await _cached(client, first, "a3") < 64
        loads = await client.get_loads()
        info = await client.get_server_info()
    assert info.server_args["page_size"] == 16
    assert info.server_args["disable_radix_cache"] is False
    assert info.max_total_num_tokens == 128
    load = loads.loads[0]
    assert load.max_total_num_tokens == 128
    assert 0 < load.token_usage <= 1.0
    assert load.num_used_tokens == sim.servicer.ranks[0].cache.used_blocks * 16
    assert 0 < load.cache_hit_rate < 1
    (stats,) = sim.rank_stats  # for a benchmark: its hit rate over a window
    assert stats["cached_tokens"] == 64 + 32
    assert stats["prompt_tokens"] == 3 * 65 + 97


async def test_the_lora_adapter_is_part_of_the_namespace() -> None:
    async with (
        SimWorker(port=0, lora_adapters=["sql"]) as sim,
        WorkerClient(sim.url) as client,
    ):
        lora_id = sim.servicer.adapters.by_name["sql"].lora_id
        prompt = [*_ids(*range(30, 34), size=16), 5]
        assert await _cached(client, prompt, "base1") == 0
        assert await _cached(client, prompt, "sql1", lora_id) == 0
        assert await _cached(client, prompt, "sql2", lora_id) == 64
        assert await _cached(client, prompt, "base2") == 64


async def test_generated_tokens_are_cached_for_the_next_turn() -> None:
    async with SimWorker(port=0) as sim, WorkerClient(sim.url) as client:
        prompt = _ids(*range(40, 43), size=16)
        answer = await fold(client.generate(_request(prompt, "t1", max_new_tokens=40)))
        history = prompt + answer.tokens[0] + _ids(50, size=16)
        again = await fold(client.generate(_request(history, "t2")))
    generated = len(answer.tokens[0])
    assert generated >= 16
    assert again.completes[0].cached_tokens == (len(prompt) + generated) // 16 * 16


async def test_prefill_time_is_paid_per_uncached_token() -> None:
    async with (
        SimWorker(port=0, prefill_tokens_per_s=500) as sim,
        WorkerClient(sim.url) as client,
    ):
        prompt = [*_ids(*range(60, 76), size=16), 5]  # 257 tokens: 0.5 s cold
        started = time.monotonic()
        await _cached(client, prompt, "cold")
        cold = time.monotonic() - started
        started = time.monotonic()
        assert await _cached(client, prompt, "warm") == 256
        warm = time.monotonic() - started
    assert cold >= 0.5
    assert warm < cold / 2


async def test_prefills_on_one_rank_take_turns() -> None:
    async with (
        SimWorker(port=0, prefill_tokens_per_s=1000) as sim,
        WorkerClient(sim.url) as client,
    ):
        prompts = [_ids(*range(k, k + 13), size=16) for k in (110, 130)]  # 208 tokens each
        started = time.monotonic()
        await asyncio.gather(*(_cached(client, p, f"p{i}") for i, p in enumerate(prompts)))
        both = time.monotonic() - started
    assert both >= 0.4  # one prefill after the other, not side by side


async def test_loads_show_the_waiting_uncached_work() -> None:
    async with (
        SimWorker(port=0, max_running=1, delay_ms=50) as sim,
        WorkerClient(sim.url) as client,
    ):
        warm = [*_ids(*range(80, 84), size=16), 5]
        await _cached(client, warm, "w0")
        busy = client.generate(_request(_ids(90, size=16), "busy", max_new_tokens=50))
        await anext(busy)
        waiting = [
            client.generate(_request(warm, "w1")),
            client.generate(_request([*_ids(*range(100, 104), size=16), 5], "cold")),
        ]
        tasks = [asyncio.create_task(anext(w)) for w in waiting]
        await asyncio.sleep(0.1)
        load = (await client.get_loads()).loads[0]
        assert load.num_waiting_reqs == 2
        assert load.num_waiting_uncached_tokens == 1 + 65
        for stream in (busy, *waiting):
            await stream.aclose()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

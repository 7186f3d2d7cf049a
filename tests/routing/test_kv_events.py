"""Routing on the engines' KV events and pushed load, and wedge/stale detection: the index on
its own, then the registry's subscribers against a real gRPC worker that streams scripted
``SubscribeKvEvents`` batches over loopback sockets."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import grpc
import pytest

from turnout.plugins.policies.cache_aware import CacheAwarePolicy
from turnout.plugins.policies.load import LeastLoadPolicy, PowerOfTwoPolicy
from turnout.routing.dispatch import Dispatcher
from turnout.routing.kv import cached_tokens
from turnout.routing.types import Candidate, RoutingRequest
from turnout.wire.proto import common_pb2 as cpb
from turnout.workers.kv_events import KvSubscriber
from turnout.workers.kv_index import KvIndex
from turnout.workers.registry import WorkerRegistry
from turnout.workers.settings import HealthSettings, WorkerSpec

from ._worker import TestWorker, make_request
from .conftest import fast_settings

BLOCK = 4


async def eventually(predicate: Callable[[], object], within: float) -> bool:
    deadline = time.monotonic() + within
    while not predicate():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.02)
    return True


def stored(
    tokens: Sequence[int], first_hash: int, parent: int | None = None, lora: str | None = None
) -> cpb.KvCacheEvent:
    """Blocks of ``tokens`` (full blocks of BLOCK), hashed first_hash, first_hash+1, ..."""
    blocks = [
        cpb.KvBlock(block_hash=first_hash + i, token_ids=tokens[s : s + BLOCK], block_size=BLOCK)
        for i, s in enumerate(range(0, len(tokens), BLOCK))
    ]
    event = cpb.KvBlocksStored(blocks=blocks)
    if parent is not None:
        event.parent_block_hash = parent
    if lora is not None:
        event.lora_name = lora
    return cpb.KvCacheEvent(stored=event)


def removed(*hashes: int) -> cpb.KvCacheEvent:
    return cpb.KvCacheEvent(removed=cpb.KvBlocksRemoved(block_hashes=list(hashes)))


CLEARED = cpb.KvCacheEvent(cleared=cpb.KvCacheCleared())
PROMPT = list(range(100, 116))  # four blocks


# -- the index ----------------------------------------------------------------------------------


def test_index_matches_full_blocks_of_stored_chains() -> None:
    index = KvIndex()
    index.apply([stored(PROMPT[:8], 1)])
    index.apply([stored(PROMPT[8:12], 3, parent=2)])
    assert index.match(PROMPT) == 12
    assert index.match(PROMPT[:7]) == 4  # full blocks only
    assert index.match([9, *PROMPT[1:]]) == 0  # a different first block
    assert index.match(PROMPT, adapter="a") == 0  # the adapter is part of the key
    index.apply([removed(2)])  # evicting the middle block ends the match there
    assert index.match(PROMPT) == 4
    index.apply([CLEARED])
    assert index.match(PROMPT) == 0
    assert len(index) == 0


def test_index_keeps_adapters_apart_and_skips_unknown_parents() -> None:
    index = KvIndex()
    index.apply([stored(PROMPT[:4], 1, lora="a")])
    assert index.match(PROMPT, adapter="a") == 4
    assert index.match(PROMPT) == 0
    index.apply([stored(PROMPT[4:8], 7, parent=99)])  # parent never seen: not matchable
    assert len(index) == 1


@dataclass
class _Indexed:
    id: str
    kv_index: KvIndex | None
    url: str = ""
    load: int = 0


def test_cached_tokens_per_candidate() -> None:
    depths = [0, 1, 3, 4, 2]
    cands = []
    for n, depth in enumerate(depths):
        index = KvIndex()
        if depth:
            index.apply([stored(PROMPT[: depth * BLOCK], 100 * n)])
        cands.append(_Indexed(f"w{n}", index))
    routing = RoutingRequest(model="m", token_ids=(*PROMPT, 1, 2, 3))
    assert cached_tokens(routing, cands) == [d * BLOCK for d in depths]
    assert cached_tokens(RoutingRequest(model="m", token_ids=PROMPT, adapter="a"), cands) == [0] * 5
    assert cached_tokens(routing, [*cands, _Indexed("none", None)]) is None
    assert cached_tokens(RoutingRequest(model="m", text="hi"), cands) is None


def test_index_is_bounded() -> None:
    index = KvIndex(max_blocks=3)
    index.apply([stored(PROMPT[:12], 1)])
    assert len(index) == 3
    index.apply([stored([5] * 4, 20)])  # one more: it starts over rather than grow
    assert len(index) <= 3


# -- subscribers over real sockets ---------------------------------------------------------------


def batch(seq: int, *events: cpb.KvCacheEvent, rank: int | None = None) -> cpb.KvEventBatch:
    b = cpb.KvEventBatch(sequence_number=seq, events=list(events))
    if rank is not None:
        b.dp_rank = rank
    return b


def health(**changes: object) -> HealthSettings:
    base: dict[str, object] = {
        "interval_s": 0.2,
        "timeout_s": 0.5,
        "pending_interval_s": 0.05,
        "failure_threshold": 2,
        "success_threshold": 1,
        "wedge_after_s": 0.5,
        "stale_after_s": 0.5,
    }
    base.update(changes)
    return HealthSettings(**base)  # type: ignore[arg-type]


async def streaming_worker(workers: Callable[..., object]) -> TestWorker:
    (worker,) = await workers(1)  # type: ignore[misc]
    worker.kv_batches = asyncio.Queue(maxsize=100)
    return worker


async def test_index_follows_events_resumes_and_rebuilds_after_a_gap(
    workers: Callable[..., object], registry_for: Callable[..., object]
) -> None:
    tw = await streaming_worker(workers)
    registry: WorkerRegistry = await registry_for([tw], health=health())  # type: ignore[misc]
    (w,) = registry.all()
    assert await eventually(lambda: tw.kv_subscribers == 1, 5)
    assert tw.kv_starts == [0]
    assert tw.kv_batches is not None
    await tw.kv_batches.put(batch(1, stored(PROMPT[:8], 1)))
    assert await eventually(lambda: w.kv_index is not None and len(w.kv_index) == 2, 5)
    routing = RoutingRequest(model="m", token_ids=PROMPT)
    assert cached_tokens(routing, [w]) == [8]

    # The connection drops: the subscriber comes back asking for the batch after the last.
    await tw.stop()
    await tw.start()
    assert await eventually(lambda: tw.kv_subscribers == 1 and len(tw.kv_starts) == 2, 10)
    assert tw.kv_starts[-1] == 2
    await tw.kv_batches.put(batch(2, stored(PROMPT[8:12], 3, parent=2)))
    assert await eventually(lambda: cached_tokens(routing, [w]) == [12], 5)

    # Batch 3 is lost: everything known before is dropped, and rebuilt from what follows.
    await tw.kv_batches.put(batch(4, stored([7] * 4, 10)))
    assert w.kv is not None
    assert await eventually(lambda: w.kv is not None and w.kv.rebuilds == 1, 5)
    assert cached_tokens(routing, [w]) == [0]
    assert w.kv_index is not None
    assert w.kv_index.match([7] * 4) == 4

    # A flush: the index is empty.
    await tw.kv_batches.put(batch(5, CLEARED))
    assert await eventually(lambda: w.kv_index is not None and len(w.kv_index) == 0, 5)

    # Removal stops the subscription: no task is left behind.
    kv = w.kv
    await registry.remove(w.id, drain_timeout_s=1)
    assert not kv.running
    assert not [t for t in asyncio.all_tasks() if t.get_name().startswith("turnout-kv-events")]
    assert await eventually(lambda: tw.kv_subscribers == 0, 5)


async def test_worker_without_events_falls_back(
    workers: Callable[..., object], registry_for: Callable[..., object]
) -> None:
    (tw,) = await workers(1)  # type: ignore[misc]
    registry: WorkerRegistry = await registry_for([tw], health=health())  # type: ignore[misc]
    (w,) = registry.all()
    assert await eventually(lambda: w.kv is not None and not w.kv.supported, 5)
    assert w.kv_index is None
    assert not w.pushes_load
    assert w.routable
    routing = RoutingRequest(model="m", token_ids=PROMPT)
    assert cached_tokens(routing, [w]) is None
    assert CacheAwarePolicy().select(routing, [w]) is w  # the tree path


async def test_cache_aware_follows_the_engines_cache(
    workers: Callable[..., object], registry_for: Callable[..., object]
) -> None:
    fleet = [await streaming_worker(workers) for _ in range(3)]
    for tw in fleet:
        tw.heartbeat_s = 0.05  # a stream is live once it said something
    registry: WorkerRegistry = await registry_for(fleet, health=health())  # type: ignore[misc]
    assert await eventually(lambda: all(w.kv_index is not None for w in registry.all()), 5)
    holder = fleet[1]
    assert holder.kv_batches is not None
    await holder.kv_batches.put(batch(1, stored(PROMPT, 1)))
    worker = registry.get(f"127.0.0.1:{holder.port}")
    assert worker is not None
    assert await eventually(lambda: worker.kv_index is not None and len(worker.kv_index) == 4, 5)
    policy = CacheAwarePolicy()
    routing = RoutingRequest(model="m", token_ids=[*PROMPT, 1, 2])
    candidates: list[Candidate] = list(registry.candidates("m"))
    picks = {policy.select(routing, candidates).id for _ in range(5)}
    assert picks == {worker.id}


async def test_pushed_load_replaces_polling(
    workers: Callable[..., object], registry_for: Callable[..., object]
) -> None:
    tw = await streaming_worker(workers)
    tw.heartbeat_s = 0.05
    tw.heartbeat_load = cpb.EngineLoad(running_requests=5, waiting_requests=2)
    tw.reported_load = 40  # what GetLoads would say: never asked
    registry: WorkerRegistry = await registry_for([tw], health=health())  # type: ignore[misc]
    (w,) = registry.all()
    assert await eventually(lambda: w.pushes_load, 5)
    await asyncio.sleep(0.3)  # several load-monitor periods
    assert w.load == 7
    assert w.engine_load is not None
    assert w.engine_load.running_requests == 5


async def test_wedged_engine_leaves_rotation_and_comes_back(
    workers: Callable[..., object], registry_for: Callable[..., object]
) -> None:
    tw = await streaming_worker(workers)
    tw.heartbeat_s = 0.05
    registry: WorkerRegistry = await registry_for([tw], health=health())  # type: ignore[misc]
    (w,) = registry.all()
    assert await eventually(lambda: w.kv is not None and w.kv.heartbeats, 5)
    # Silent for a while, but with prefill in hand that may take 2s at the assumed rate.
    tw.heartbeat_load = cpb.EngineLoad(
        running_requests=1, engine_silence_ms=600, prefill_pending_tokens=4000
    )
    await asyncio.sleep(0.6)
    assert w.routable
    tw.heartbeat_load = cpb.EngineLoad(running_requests=1, engine_silence_ms=3000)
    started = time.monotonic()
    assert await eventually(lambda: not w.routable, 3)
    print(f"wedged worker out after {time.monotonic() - started:.2f}s: {w.vetoed}")
    assert w.vetoed is not None
    assert "produced nothing" in w.vetoed
    tw.heartbeat_load = cpb.EngineLoad(running_requests=1)
    assert await eventually(lambda: w.routable, 3)


@pytest.mark.parametrize(
    ("how", "bound_s"),
    [("stopped", 0.5), ("wedged", 0.5), ("stopped", None), ("wedged", None)],
    ids=["stopped", "wedged", "stopped-defaults", "wedged-defaults"],
)
async def test_a_request_waiting_on_a_stopped_or_wedged_worker_moves(
    workers: Callable[..., object],
    registry_for: Callable[..., object],
    how: str,
    bound_s: float | None,
) -> None:
    """``None``: the shipped defaults of ``wedge_after_s`` and ``stale_after_s``."""
    fleet = [await streaming_worker(workers) for _ in range(2)]
    for tw in fleet:
        tw.heartbeat_s = 0.05
    stuck, good = fleet
    stuck.first_delay = 60.0
    defaults = HealthSettings()
    bounds = {
        "wedge_after_s": bound_s or defaults.wedge_after_s,
        "stale_after_s": bound_s or defaults.stale_after_s,
    }
    limit = bound_s or max(HealthSettings().wedge_after_s, HealthSettings().stale_after_s)
    registry: WorkerRegistry = await registry_for(  # type: ignore[misc]
        fleet, health=health(**bounds)
    )
    workers_by_port = {w.url: w for w in registry.all()}
    w_stuck = workers_by_port[stuck.url]
    assert await eventually(lambda: all(w.kv and w.kv.heartbeats for w in registry.all()), 5)

    class StuckFirst:
        def select(self, request: RoutingRequest, candidates: Sequence[Candidate]) -> Candidate:
            return next((c for c in candidates if c.id == w_stuck.id), candidates[0])

    dispatcher = Dispatcher(registry, default_policy=StuckFirst())
    routing = RoutingRequest(model="m", token_ids=(1, 2, 3))
    opened = asyncio.ensure_future(
        dispatcher.open_stream("m", routing, make_request("r1"), timeout=30)
    )
    assert await eventually(lambda: stuck.active == 1, 5)
    started = time.monotonic()
    if how == "stopped":
        stuck.heartbeat_s = 0.0  # its stream falls silent, as a SIGSTOPped process's does
    else:  # it keeps heartbeating, its engine silent since the request came
        stuck.silent_since = asyncio.get_running_loop().time()
    session = await asyncio.wait_for(opened, limit + 3)
    waited = time.monotonic() - started
    print(f"request moved off the {how} worker after {waited:.2f}s: {w_stuck.vetoed}")
    assert waited < limit + 1.0
    async with session:
        assert session.worker.url == good.url
        async for _ in session:
            pass
    assert not w_stuck.routable
    assert w_stuck.vetoed
    assert ("silent" if how == "stopped" else "produced nothing") in w_stuck.vetoed
    assert stuck.active == 0  # aborted there
    assert stuck.kv_batches is not None
    stuck.silent_since = None
    await stuck.kv_batches.put(cpb.KvEventBatch(load=cpb.EngineLoad(load_only=True)))
    assert await eventually(lambda: w_stuck.routable, 3)


async def test_load_policies_tell_equal_loads_apart_by_pushed_token_work(
    workers: Callable[..., object], registry_for: Callable[..., object]
) -> None:
    fleet = [await streaming_worker(workers) for _ in range(2)]
    busy, light = fleet
    for tw, queued in ((busy, 5000), (light, 10)):
        tw.heartbeat_s = 0.05
        tw.heartbeat_load = cpb.EngineLoad(
            running_requests=2, waiting_requests=1, waiting_uncached_tokens=queued
        )
    registry: WorkerRegistry = await registry_for(fleet, health=health())  # type: ignore[misc]
    assert await eventually(lambda: all(w.pushes_load for w in registry.all()), 5)
    candidates: list[Candidate] = list(registry.candidates("m"))
    assert {c.load for c in candidates} == {3}
    routing = RoutingRequest(model="m", token_ids=(1, 2, 3))
    for policy in (LeastLoadPolicy(), PowerOfTwoPolicy(seed=1)):
        picks = {policy.select(routing, candidates).url for _ in range(10)}
        assert picks == {light.url}, policy


async def test_each_dp_rank_has_its_own_index_and_load(workers: Callable[..., object]) -> None:
    tw = await streaming_worker(workers)
    registry = WorkerRegistry(fast_settings([WorkerSpec(url=tw.url, dp_size=2)], health=health()))
    await registry.start()
    try:
        (w,) = registry.all()
        assert await registry.wait_ready(w.id, 5)
        assert tw.kv_batches is not None
        rank1_load = cpb.EngineLoad(running_requests=2)
        await tw.kv_batches.put(batch(1, stored(PROMPT, 1), rank=1))
        await tw.kv_batches.put(cpb.KvEventBatch(sequence_number=1, dp_rank=1, load=rank1_load))
        rank0, rank1 = w.ranks
        assert await eventually(lambda: rank1.load == 2, 5)
        routing = RoutingRequest(model="m", token_ids=PROMPT)
        assert cached_tokens(routing, [rank0, rank1]) == [0, 16]
        assert CacheAwarePolicy().select(routing, [rank0, rank1]) is rank1
        assert rank0.load == 0
        # Each rank numbers its own batches: interleaved, they are no gap.
        await tw.kv_batches.put(batch(1, stored([7] * 4, 70), rank=0))
        await tw.kv_batches.put(batch(2, stored([8] * 4, 80), rank=1))
        await tw.kv_batches.put(batch(2, stored([9] * 4, 90), rank=0))
        assert await eventually(lambda: cached_tokens(routing, [rank0]) == [0], 5)
        assert await eventually(lambda: w.kv is not None and w.kv.engines[0].last_seq == 2, 5)
        assert w.kv is not None
        assert w.kv.rebuilds == 0
        assert cached_tokens(routing, [rank0, rank1]) == [0, 16]
        # Or the stream numbers them (turnout sim, SGLang's servicer): no gap either.
        for seq, rank in ((3, 1), (4, 0), (5, 1)):
            await tw.kv_batches.put(batch(seq, stored([seq] * 4, 100 + seq), rank=rank))
        assert await eventually(lambda: w.kv is not None and w.kv.last_seq == 5, 5)
        assert w.kv.rebuilds == 0
        await tw.kv_batches.put(batch(7, stored([7] * 4, 107), rank=0))  # 6 was lost
        assert await eventually(lambda: w.kv is not None and w.kv.rebuilds == 1, 5)
        assert cached_tokens(routing, [rank0, rank1]) == [0, 0]
    finally:
        await registry.stop()
    assert not w.kv or not w.kv.running


def test_a_snapshot_replaces_what_was_known() -> None:
    class _Worker:
        id = "w"
        dp_size = 1

        def take_pushed_load(self, rank: int, count: int) -> None:
            pass

    kv = KvSubscriber(_Worker(), source=None)  # type: ignore[arg-type]
    kv.take(batch(5, stored([7] * 4, 50)))
    chunk = cpb.KvSnapshotChunk(index=0, count=2, blocks=3)
    kv.take(
        cpb.KvEventBatch(sequence_number=9, events=[CLEARED, stored(PROMPT[:8], 1)], snapshot=chunk)
    )
    chunk = cpb.KvSnapshotChunk(index=1, count=2, blocks=3)
    kv.take(
        cpb.KvEventBatch(
            sequence_number=9, events=[stored(PROMPT[8:12], 3, parent=2)], snapshot=chunk
        )
    )
    index = kv.engines[0].index
    assert index.match(PROMPT) == 12
    assert index.match([7] * 4) == 0
    kv.take(batch(10, removed(3)))  # the stream goes on after the snapshot: no gap
    assert kv.rebuilds == 1
    assert index.match(PROMPT) == 8


async def test_a_worker_that_comes_back_with_events_is_subscribed_again(
    workers: Callable[..., object], registry_for: Callable[..., object]
) -> None:
    (tw,) = await workers(1)  # type: ignore[misc]
    registry: WorkerRegistry = await registry_for([tw], health=health())  # type: ignore[misc]
    (w,) = registry.all()
    assert await eventually(lambda: w.kv is not None and not w.kv.supported, 5)
    # Restarted as a version that streams events.
    await tw.stop()
    assert await eventually(lambda: not w.routable, 5)
    tw.kv_batches = asyncio.Queue(maxsize=10)
    tw.heartbeat_s = 0.05
    await tw.start()
    assert await eventually(lambda: w.kv_index is not None, 10)


async def test_an_idle_worker_may_heartbeat_slowly(
    workers: Callable[..., object], registry_for: Callable[..., object]
) -> None:
    """An idle servicer may heartbeat seldom: with no request owed a record, its stream is
    stale only past ``stale_after_s`` plus the longest gap between its records so far."""
    tw = await streaming_worker(workers)
    tw.heartbeat_s = 0.8
    registry: WorkerRegistry = await registry_for([tw], health=health())  # type: ignore[misc]
    (w,) = registry.all()
    assert await eventually(lambda: w.kv is not None and w.kv.longest_gap >= 0.7, 5)
    assert w.kv is not None
    tw.heartbeat_s = 0.0  # after its next heartbeat, nothing
    heard = w.kv.heard_at
    assert await eventually(lambda: w.kv is not None and w.kv.heard_at > heard, 2)
    await asyncio.sleep(1.0)  # twice stale_after_s, within stale_after_s plus the gap
    assert w.routable
    assert await eventually(lambda: not w.routable, 3)


async def test_lost_events_and_a_refused_resume_start_over(
    workers: Callable[..., object], registry_for: Callable[..., object]
) -> None:
    """``DATA_LOSS`` (the worker lost events) and ``OUT_OF_RANGE`` (it keeps nothing to resume
    from) end in a subscription from now, with the index rebuilt from scratch."""
    tw = await streaming_worker(workers)
    tw.refuse_resume = True
    registry: WorkerRegistry = await registry_for([tw], health=health())  # type: ignore[misc]
    (w,) = registry.all()
    assert tw.kv_batches is not None
    assert await eventually(lambda: tw.kv_subscribers == 1, 5)
    await tw.kv_batches.put(batch(1, stored(PROMPT[:8], 1)))
    assert await eventually(lambda: w.kv_index is not None and len(w.kv_index) == 2, 5)
    await tw.kv_batches.put(grpc.StatusCode.DATA_LOSS)
    assert await eventually(lambda: len(tw.kv_starts) == 2 and tw.kv_subscribers == 1, 5)
    assert tw.kv_starts == [0, 0]
    await tw.kv_batches.put(batch(1, stored(PROMPT[:4], 1)))
    assert await eventually(lambda: w.kv_index is not None and len(w.kv_index) == 1, 5)

    await tw.stop()  # the connection drops: resuming from batch 2 is refused
    await tw.start()
    assert await eventually(lambda: len(tw.kv_starts) == 4 and tw.kv_subscribers == 1, 10)
    assert tw.kv_starts[2:] == [2, 0]
    assert w.kv is not None
    assert len(w.kv.engines[0].index) == 0


async def test_a_request_unanswered_by_a_slow_heartbeating_stream_is_stale_soon(
    workers: Callable[..., object], registry_for: Callable[..., object]
) -> None:
    """A request moves the worker's load record, which goes out at once: with none heard
    ``stale_after_s`` after it, the worker is out, however seldom it heartbeats when idle."""
    fleet = [await streaming_worker(workers) for _ in range(2)]
    stuck, good = fleet
    stuck.heartbeat_s, good.heartbeat_s = 0.8, 0.05
    stuck.first_delay = 60.0
    registry: WorkerRegistry = await registry_for(fleet, health=health())  # type: ignore[misc]
    w_stuck = next(w for w in registry.all() if w.url == stuck.url)
    assert await eventually(lambda: w_stuck.kv is not None and w_stuck.kv.longest_gap >= 0.7, 5)
    assert w_stuck.kv is not None
    stuck.heartbeat_s = 0.0  # stopped after its next heartbeat
    heard = w_stuck.kv.heard_at
    assert await eventually(lambda: w_stuck.kv is not None and w_stuck.kv.heard_at > heard, 2)

    class StuckFirst:
        def select(self, request: RoutingRequest, candidates: Sequence[Candidate]) -> Candidate:
            return next((c for c in candidates if c.id == w_stuck.id), candidates[0])

    dispatcher = Dispatcher(registry, default_policy=StuckFirst())
    started = time.monotonic()
    session = await asyncio.wait_for(
        dispatcher.open_stream("m", RoutingRequest(model="m"), make_request("r"), timeout=30),
        5,
    )
    waited = time.monotonic() - started
    async with session:
        assert session.worker.url == good.url
        async for _ in session:
            pass
    assert waited < 0.5 + 0.5  # stale_after_s after the request, not after the 0.8 s gap too

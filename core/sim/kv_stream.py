"""``SubscribeKvEvents`` for the simulator: the KV event log as ``smg.grpc.common`` batches.

A subscription replays the kept batches after its ``start_sequence_number`` (a cursor that fell
out of the ring is ``OUT_OF_RANGE``, and a subscriber that falls so far behind that the ring
overtakes it gets ``DATA_LOSS``: either way it starts over from 0), then follows the log live.
From 0 it gets the current state first: a snapshot of every rank's cached blocks
(``KvSnapshotChunk`` batches numbered up to the newest sequence, each a ``cleared`` of its rank
and then its blocks, parents first), exact however long ago the ring wrapped.

Each batch carries its rank's :class:`EngineLoad`; when a rank's load changed without an event
(an admission served from cache, a first token, a completion) and once a second while nothing
else is sent, a ``load_only`` record per rank repeats the last sequence number sent, so a
subscriber sees the engine's queue, its silence (``engine_silence_ms``) and its prefill work in
hand (``prefill_pending_tokens``) within a second without polling ``GetLoads``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any, Final

import grpc
import grpc.aio

from turnout.sim.kv_cache import BlocksRemoved, BlocksStored, CacheCleared, EventBatch, KvEvent
from turnout.sim.ranks import Rank
from turnout.wire.proto import common_pb2

if TYPE_CHECKING:
    from turnout.sim.servicer import SimServicer

__all__ = ["HEARTBEAT_S", "engine_load", "kv_event_stream", "snapshot", "to_proto"]

#: A load record per rank at least this often while no batch is sent, seconds.
HEARTBEAT_S: Final = 1.0
#: Load-only records of a busy stream are at least this far apart, seconds.
_COALESCE_S: Final = 0.02


def to_proto(batch: EventBatch, load: common_pb2.EngineLoad | None) -> common_pb2.KvEventBatch:
    """One logged batch as ``KvEventBatch`` (with ``load`` attached when given)."""
    out = common_pb2.KvEventBatch(
        sequence_number=batch.sequence_number,
        timestamp=batch.timestamp,
        events=[_event(e) for e in batch.events],
        dp_rank=batch.dp_rank,
    )
    if load is not None:
        out.load.CopyFrom(load)
    return out


def _event(event: KvEvent) -> common_pb2.KvCacheEvent:
    if isinstance(event, BlocksStored):
        stored = common_pb2.KvBlocksStored(
            blocks=[
                common_pb2.KvBlock(
                    block_hash=b.block_hash, token_ids=b.token_ids, block_size=event.block_size
                )
                for b in event.blocks
            ]
        )
        if event.parent_block_hash is not None:
            stored.parent_block_hash = event.parent_block_hash
        if event.lora_name is not None:
            stored.lora_name = event.lora_name
        return common_pb2.KvCacheEvent(event_id=event.event_id, stored=stored)
    if isinstance(event, BlocksRemoved):
        removed = common_pb2.KvBlocksRemoved(block_hashes=event.block_hashes)
        return common_pb2.KvCacheEvent(event_id=event.event_id, removed=removed)
    return common_pb2.KvCacheEvent(event_id=event.event_id, cleared=common_pb2.KvCacheCleared())


def snapshot(ranks: Sequence[Rank], taken_at: int) -> list[common_pb2.KvEventBatch]:
    """The cached blocks of every rank holding any, as the chunks of a state snapshot taken
    at sequence ``taken_at``: one chunk per such rank, numbered consecutively up to
    ``taken_at``, each a ``cleared`` for its rank and then its blocks, parents first."""
    holding = [r for r in ranks if r.cache.used_blocks]
    chunks = []
    for index, rank in enumerate(holding):
        stored = rank.cache.live_chains()
        events: list[KvEvent] = [CacheCleared(0), *stored]
        logged = EventBatch(
            taken_at - len(holding) + 1 + index, time.time(), tuple(events), rank.index
        )
        chunk = to_proto(logged, None)
        chunk.snapshot.CopyFrom(
            common_pb2.KvSnapshotChunk(
                index=index,
                count=len(holding),
                blocks=sum(r.cache.used_blocks for r in holding),
                unknown_before=0,
            )
        )
        chunks.append(chunk)
    return chunks


def engine_load(
    rank: Rank, *, capacity: int, uptime_s: float, sample: int, telemetry: bool
) -> common_pb2.EngineLoad:
    """``rank``'s load as ``EngineLoad`` (the numbers ``GetLoads`` answers with); the
    telemetry beyond the routing core only when ``telemetry`` (the heartbeat cadence)."""
    used = rank.used_tokens()
    active = sum(s.tokens for s in rank.running.values())
    load = common_pb2.EngineLoad(
        running_requests=rank.slots_used,
        waiting_requests=rank.waiting,
        waiting_uncached_tokens=rank.waiting_uncached_tokens,
        token_usage=min(used / capacity, 1.0) if capacity else 0.0,
        active_token_usage=min(active / capacity, 1.0) if capacity else 0.0,
        gen_throughput=rank.tokens_out / max(uptime_s, 1e-6),
        max_running_requests=rank.max_running,
        age_ms=0,
        sample=sample,
    )
    if rank.slots_used:  # requests admitted: how long the engine has been quiet, and its work
        quiet = rank.slots_used > rank.delivering  # else every request waits on its reader
        load.engine_silence_ms = int((time.monotonic() - rank.last_output) * 1000) if quiet else 0
        load.prefill_pending_tokens = rank.prefill_pending_tokens
    if telemetry:
        load.cache_hit_rate = rank.cache.hit_rate
        load.num_used_tokens = used
        load.max_total_num_tokens = capacity
        load.queues.CopyFrom(common_pb2.EngineQueues(waiting=rank.waiting))
        load.memory.CopyFrom(common_pb2.EngineMemory(token_capacity=capacity))
    return load


def _fingerprint(rank: Rank) -> tuple[int, ...]:
    """What changes a rank's routing load (compared between records)."""
    return (
        rank.slots_used,
        rank.waiting,
        rank.waiting_uncached_tokens,
        rank.cache.used_blocks,
        rank.prefill_pending_tokens,
    )


async def kv_event_stream(
    servicer: SimServicer,
    request: common_pb2.SubscribeKvEventsRequest,
    context: grpc.aio.ServicerContext[Any, Any],
) -> AsyncIterator[common_pb2.KvEventBatch]:
    """The ``SubscribeKvEvents`` stream of ``servicer`` (see the module doc)."""
    log = servicer.kv_events
    cursor = int(request.start_sequence_number)
    if cursor and log.expired(cursor):
        await context.abort(
            grpc.StatusCode.OUT_OF_RANGE,
            f"KV events after sequence {cursor} are no longer kept "
            f"(the newest is {log.last_sequence}); subscribe from 0",
        )
    servicer.records.kv_subscriptions.append(cursor)
    with contextlib.suppress(AttributeError):  # grpcio: answer the headers before any batch
        await context.send_initial_metadata(())
    ranks: Sequence[Rank] = servicer.ranks
    early_loads = request.load_records_before_first_batch
    sample = 0
    sent_load: dict[int, tuple[int, ...]] = {}
    last_record = time.monotonic()
    sent = cursor  # the last sequence number sent on the stream: load-only records repeat it
    if not cursor:  # the current state first, then what follows it
        capacity = servicer.capacity_tokens
        cursor = log.last_sequence
        for chunk in snapshot(ranks, cursor):
            rank = ranks[chunk.dp_rank]
            sample += 1
            chunk.load.CopyFrom(
                engine_load(
                    rank,
                    capacity=capacity,
                    uptime_s=time.time() - servicer.started,
                    sample=sample,
                    telemetry=True,
                )
            )
            sent_load[rank.index] = _fingerprint(rank)
            sent = chunk.sequence_number
            yield chunk
    while True:
        wake = log.changed()
        batches = log.since(cursor)
        if batches and batches[0].sequence_number > cursor + 1:
            await context.abort(
                grpc.StatusCode.DATA_LOSS,
                f"the subscriber fell behind: events after {cursor} are gone; subscribe from 0",
            )
        uptime = time.time() - servicer.started
        capacity = servicer.capacity_tokens
        for batch in batches:
            rank = ranks[batch.dp_rank]
            sample += 1
            first = rank.index not in sent_load
            load = engine_load(
                rank, capacity=capacity, uptime_s=uptime, sample=sample, telemetry=first
            )
            sent_load[rank.index] = _fingerprint(rank)
            cursor = sent = batch.sequence_number
            last_record = time.monotonic()
            yield to_proto(batch, load)
        now = time.monotonic()
        if not batches and (sent or early_loads):
            due = now - last_record >= HEARTBEAT_S
            changed = [r for r in ranks if sent_load.get(r.index) != _fingerprint(r)]
            if due or (changed and now - last_record >= _COALESCE_S):
                for rank in ranks if due else changed:
                    sample += 1
                    load = engine_load(
                        rank, capacity=capacity, uptime_s=uptime, sample=sample, telemetry=due
                    )
                    load.load_only = True
                    sent_load[rank.index] = _fingerprint(rank)
                    yield common_pb2.KvEventBatch(
                        sequence_number=sent, timestamp=time.time(), dp_rank=rank.index, load=load
                    )
                last_record = now = time.monotonic()
            elif changed:  # coalesce: come back when the window is over
                await asyncio.sleep(_COALESCE_S - (now - last_record))
                continue
        # Before its first batch a subscriber without early load records waits for one.
        timeout = max(HEARTBEAT_S - (now - last_record), 0.0) if sent or early_loads else None
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(wake.wait(), timeout)

"""One data-parallel rank of the simulated worker: its own queue, running set, cache and stats.

An SGLang worker started with ``--dp-size N`` (DP attention) runs N schedulers behind one gRPC
endpoint; each has its own waiting queue, running batch and radix cache, and ``GetLoads``
reports each one separately. The simulator keeps one :class:`Rank` per scheduler.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from turnout.wire.proto import sglang_scheduler_pb2 as pb

__all__ = ["Rank", "RankStats", "Running"]

_CACHE_BLOCK: Final = 16
#: Prefix blocks remembered per rank before the cache imitation starts over.
_CACHE_BLOCKS_MAX: Final = 200_000


@dataclass(slots=True)
class Running:
    """A Generate call in progress on a rank."""

    request_id: str
    tokens: int
    rank: Rank
    aborted: asyncio.Event = field(default_factory=asyncio.Event)
    #: What ``sleep`` waits on: the timer or ``abort`` settles it.
    _nap: asyncio.Future[None] | None = field(default=None, init=False, repr=False)

    def abort(self) -> None:
        """Mark the call aborted and end a ``sleep`` in progress."""
        self.aborted.set()
        nap = self._nap
        if nap is not None and not nap.done():
            nap.set_result(None)

    async def sleep(self, seconds: float) -> None:
        """Sleep, but wake up early when the call is aborted. One future and one timer per
        nap (a paced stream naps once per chunk, thousands of times a second in the bench)."""
        if seconds <= 0 or self.aborted.is_set():
            return
        loop = asyncio.get_running_loop()
        nap = self._nap = loop.create_future()
        timer = loop.call_later(seconds, _settle, nap)
        try:
            await nap
        finally:
            timer.cancel()
            self._nap = None


def _settle(nap: asyncio.Future[None]) -> None:
    if not nap.done():
        nap.set_result(None)


@dataclass(slots=True)
class RankStats:
    """What a rank did, for tests and the benchmark."""

    #: Generate calls assigned to the rank.
    requests: int = 0
    #: Tokens it generated.
    generated_tokens: int = 0
    #: Most requests ever waiting for a running slot at once.
    peak_waiting: int = 0
    #: Seconds requests spent waiting for a running slot, summed.
    queue_wait_s: float = 0.0

    def as_dict(self) -> dict[str, float]:
        """JSON-ready values."""
        return {
            "requests": self.requests,
            "generated_tokens": self.generated_tokens,
            "peak_waiting": self.peak_waiting,
            "queue_wait_s": round(self.queue_wait_s, 6),
        }


class Rank:
    """One scheduler: ``max_running`` slots (0: unlimited), a FIFO of waiters, a prefix cache."""

    def __init__(self, index: int, max_running: Callable[[], int]) -> None:
        self.index = index
        self._max_running = max_running
        self.running: dict[str, Running] = {}
        self.waiting = 0
        self.slots_used = 0
        self._slot_freed = asyncio.Condition()
        self._prefix_blocks: set[int] = set()
        self.cache_hits = 0
        self.cache_lookups = 0
        self.tokens_out = 0
        #: Requests held back by a prefill-decode rendezvous (bootstrap or KV transfer).
        self.disagg_waiting = 0
        self.stats = RankStats()

    async def acquire_slot(self) -> None:
        """Wait for a running slot (FIFO among waiters)."""
        limit = self._max_running()
        if limit <= 0:
            self.slots_used += 1
            return
        self.waiting += 1
        self.stats.peak_waiting = max(self.stats.peak_waiting, self.waiting)
        started = time.monotonic()
        try:
            async with self._slot_freed:
                await self._slot_freed.wait_for(lambda: self.slots_used < self._max_running())
                self.slots_used += 1
        finally:
            self.waiting -= 1
            self.stats.queue_wait_s += time.monotonic() - started

    async def release_slot(self) -> None:
        """Give a running slot back."""
        self.slots_used -= 1
        if self._max_running() > 0:
            async with self._slot_freed:
                self._slot_freed.notify_all()

    def cached_prefix(self, prompt: list[int]) -> int:
        """Tokens of ``prompt`` this rank saw before as a prefix (16-token blocks)."""
        digest = 0
        hit = 0
        new: list[int] = []
        for end in range(_CACHE_BLOCK, len(prompt) + 1, _CACHE_BLOCK):
            digest = hash((digest, tuple(prompt[end - _CACHE_BLOCK : end])))
            if digest in self._prefix_blocks and hit == end - _CACHE_BLOCK:
                hit = end
            new.append(digest)
        if len(self._prefix_blocks) > _CACHE_BLOCKS_MAX:
            self._prefix_blocks.clear()
        self._prefix_blocks.update(new)
        self.cache_lookups += len(prompt)
        self.cache_hits += hit
        return hit

    def count_tokens(self, count: int) -> None:
        """``count`` more tokens generated on this rank."""
        self.tokens_out += count
        self.stats.generated_tokens += count

    def load(
        self, *, capacity: int, uptime_s: float, include: set[str], mode: str
    ) -> pb.SchedulerLoad:
        """This rank's ``SchedulerLoad`` as SGLang's ``GetLoads`` reports it."""
        max_running = self._max_running()
        running = self.slots_used
        used = sum(s.tokens for s in self.running.values())
        load = pb.SchedulerLoad(
            dp_rank=self.index,
            num_running_reqs=running,
            num_waiting_reqs=self.waiting,
            num_total_reqs=running + self.waiting,
            num_used_tokens=used,
            max_total_num_tokens=capacity,
            token_usage=used / capacity if capacity else 0.0,
            gen_throughput=self.tokens_out / max(uptime_s, 1e-6),
            cache_hit_rate=self.cache_hits / self.cache_lookups if self.cache_lookups else 0.0,
            utilization=running / max_running if max_running else 0.0,
            max_running_requests=max_running,
        )
        every = "all" in include
        if every or "memory" in include:
            load.memory.CopyFrom(pb.MemoryMetrics(token_capacity=capacity))
        if every or "queues" in include:
            load.queues.CopyFrom(pb.QueueMetrics(waiting=self.waiting))
        if (every or "disagg" in include) and mode != "null":
            disagg = pb.DisaggregationMetrics(mode=mode)
            if mode == "prefill":
                disagg.prefill_prealloc_queue_reqs = self.disagg_waiting
            else:
                disagg.decode_transfer_queue_reqs = self.disagg_waiting
            load.disaggregation.CopyFrom(disagg)
        return load

"""One data-parallel rank of the simulated worker: its own queue, running set, cache and stats.

An SGLang worker started with ``--dp-size N`` (DP attention) runs N schedulers behind one gRPC
endpoint; each has its own waiting queue, running batch, prefix cache and KV event stream, and
``GetLoads`` reports each one separately. The simulator keeps one :class:`Rank` per scheduler.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from turnout.sim.kv_cache import Holding, KvCache, KvEventLog
from turnout.wire.proto import sglang_scheduler_pb2 as pb

__all__ = ["Rank", "RankStats", "Running"]


@dataclass(slots=True)
class Running:
    """A Generate call in progress on a rank."""

    request_id: str
    tokens: int
    rank: Rank
    aborted: asyncio.Event = field(default_factory=asyncio.Event)
    #: The prefix-cache blocks the request references (None before admission).
    holding: Holding | None = None
    #: Prompt tokens counted in the rank's ``prefill_pending_tokens`` until the first output.
    prefill_pending: int = 0
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
    #: Prompt tokens admitted, and those of them served from the prefix cache.
    prompt_tokens: int = 0
    cached_tokens: int = 0
    #: Generate calls the caller cancelled before they ended (a router's abort).
    cancelled: int = 0
    #: Running slots in use integrated over time (slot-seconds, as of the last slot change).
    busy_slot_s: float = 0.0

    def as_dict(self) -> dict[str, float]:
        """JSON-ready values."""
        return {
            "requests": self.requests,
            "generated_tokens": self.generated_tokens,
            "peak_waiting": self.peak_waiting,
            "queue_wait_s": round(self.queue_wait_s, 6),
            "prompt_tokens": self.prompt_tokens,
            "cached_tokens": self.cached_tokens,
            "cancelled": self.cancelled,
            "busy_slot_s": round(self.busy_slot_s, 6),
        }


class Rank:
    """One scheduler: ``max_running`` slots (0: unlimited), a FIFO of waiters, a prefix cache
    of ``kv_cache_tokens`` in blocks of ``block_size`` (0: none) logging to ``events``."""

    def __init__(
        self,
        index: int,
        max_running: Callable[[], int],
        *,
        events: KvEventLog | None = None,
        block_size: int = 16,
        kv_cache_tokens: int = 0,
    ) -> None:
        self.index = index
        self._max_running = max_running
        self.running: dict[str, Running] = {}
        self.waiting = 0
        #: Prompt tokens of the waiting requests that were not cached when they arrived.
        self.waiting_uncached_tokens = 0
        #: Prompt tokens of admitted requests that produced no output yet.
        self.prefill_pending_tokens = 0
        self.slots_used = 0
        #: ``time.monotonic()`` of the last change of ``slots_used`` (for ``busy_slot_s``).
        self._slots_changed = time.monotonic()
        self._slot_freed = asyncio.Condition()
        #: One prefill at a time: prefill compute is the rank's, whatever runs beside it.
        self.prefill_lock = asyncio.Lock()
        self.cache = KvCache(block_size, kv_cache_tokens, events or KvEventLog(), index)
        self.tokens_out = 0
        #: ``time.monotonic()`` of the last output, or of the admission that ended idleness.
        self.last_output = time.monotonic()
        #: Running requests whose last message waits for the transport to take it.
        self.delivering = 0
        #: Requests held back by a prefill-decode rendezvous (bootstrap or KV transfer).
        self.disagg_waiting = 0
        self.stats = RankStats()

    @property
    def max_running(self) -> int:
        """Running slots (0: unlimited)."""
        return max(self._max_running(), 0)

    async def acquire_slot(self, uncached_tokens: int = 0) -> None:
        """Wait for a running slot (FIFO among waiters); ``uncached_tokens`` count in
        ``waiting_uncached_tokens`` meanwhile."""
        if not self.slots_used:
            self.last_output = time.monotonic()  # silence counts from the end of idleness
        limit = self._max_running()
        if limit <= 0:
            self._count_busy()
            self.slots_used += 1
            return
        self.waiting += 1
        self.waiting_uncached_tokens += uncached_tokens
        self.cache.log.poke()
        self.stats.peak_waiting = max(self.stats.peak_waiting, self.waiting)
        started = time.monotonic()
        try:
            async with self._slot_freed:
                await self._slot_freed.wait_for(lambda: self.slots_used < self._max_running())
                self._count_busy()
                self.slots_used += 1
        finally:
            self.waiting -= 1
            self.waiting_uncached_tokens -= uncached_tokens
            self.stats.queue_wait_s += time.monotonic() - started

    async def release_slot(self) -> None:
        """Give a running slot back."""
        self._count_busy()
        self.slots_used -= 1
        self.cache.log.poke()
        if self._max_running() > 0:
            async with self._slot_freed:
                self._slot_freed.notify_all()

    def _count_busy(self) -> None:
        """Add the slot-seconds since the last change of ``slots_used`` (call before one)."""
        now = time.monotonic()
        self.stats.busy_slot_s += self.slots_used * (now - self._slots_changed)
        self._slots_changed = now

    def begin_prefill(self, state: Running) -> None:
        """``state`` was admitted: its prompt is prefill work in hand until its first output."""
        state.prefill_pending = state.tokens
        self.prefill_pending_tokens += state.tokens
        self.cache.log.poke()

    def end_prefill(self, state: Running) -> None:
        """``state`` produced output (or ended): its prompt is no longer pending (idempotent)."""
        if state.prefill_pending:
            self.prefill_pending_tokens -= state.prefill_pending
            state.prefill_pending = 0
            self.cache.log.poke()

    async def prefill(self, state: Running, uncached_tokens: int, tokens_per_s: float) -> None:
        """Spend the prefill time of ``uncached_tokens`` (one prefill at a time on the rank)."""
        if tokens_per_s <= 0 or uncached_tokens <= 0:
            return
        async with self.prefill_lock:
            await state.sleep(uncached_tokens / tokens_per_s)

    def used_tokens(self) -> int:
        """KV tokens in use: cached blocks plus what running requests hold beyond theirs."""
        cache = self.cache
        if not cache.capacity_blocks:
            return sum(s.tokens for s in self.running.values())
        size = cache.block_size
        beyond = sum(
            max(s.tokens - len(s.holding.hashes) * size, 0) if s.holding else s.tokens
            for s in self.running.values()
        )
        return cache.used_blocks * size + beyond

    def count_tokens(self, count: int) -> None:
        """``count`` more tokens generated on this rank."""
        self.tokens_out += count
        self.stats.generated_tokens += count
        self.last_output = time.monotonic()

    def load(
        self, *, capacity: int, uptime_s: float, include: set[str], mode: str
    ) -> pb.SchedulerLoad:
        """This rank's ``SchedulerLoad`` as SGLang's ``GetLoads`` reports it."""
        max_running = self._max_running()
        running = self.slots_used
        used = self.used_tokens()
        load = pb.SchedulerLoad(
            dp_rank=self.index,
            num_running_reqs=running,
            num_waiting_reqs=self.waiting,
            num_total_reqs=running + self.waiting,
            num_used_tokens=used,
            max_total_num_tokens=capacity,
            token_usage=min(used / capacity, 1.0) if capacity else 0.0,
            gen_throughput=self.tokens_out / max(uptime_s, 1e-6),
            cache_hit_rate=self.cache.hit_rate,
            utilization=running / max_running if max_running else 0.0,
            max_running_requests=max_running,
            num_waiting_uncached_tokens=self.waiting_uncached_tokens,
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

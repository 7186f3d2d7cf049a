"""How many requests the engines can take, from the loads they push on their event streams.

Each routable engine (DP rank) that pushes its load offers ``max_running_requests`` plus the
allowed ``engine_waiting``, less the work other routers gave it; one whose KV cache is full
(``active_token_usage``, else ``token_usage``, at ``kv_usage_limit``: the evictable prefix
cache does not count) or whose uncached prefill backlog is over
``waiting_prefill_tokens_limit`` offers only what this router already has on it (at least
one, so that stale numbers cannot stop admission). An engine that pushes no load, or has no
running limit, does not limit admission (unbounded).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

from turnout.admission.settings import AdmissionSettings
from turnout.workers.worker import Worker


class EngineCapacity:
    """Requests the engines of ``workers()`` can hold at once right now (call it)."""

    __slots__ = ("_kv_limit", "_prefill_limit", "_waiting", "_workers")

    def __init__(
        self, workers: Callable[[], Iterable[Worker]], settings: AdmissionSettings
    ) -> None:
        self._workers = workers
        self._waiting = settings.engine_waiting
        self._kv_limit = settings.kv_usage_limit
        self._prefill_limit = settings.waiting_prefill_tokens_limit

    def __call__(self) -> float:
        total = 0
        seen = False
        for worker in self._workers():
            if not worker.routable:
                continue
            for slot in worker.ranks or (worker,):
                load = slot.engine_load
                if load is None or load.max_running_requests <= 0:
                    return math.inf
                seen = True
                own = slot.in_flight
                # The evictable prefix cache is free room: count what cannot be evicted.
                used = (
                    load.active_token_usage
                    if load.HasField("active_token_usage")
                    else load.token_usage
                )
                if used >= self._kv_limit or (
                    self._prefill_limit and load.waiting_uncached_tokens >= self._prefill_limit
                ):
                    total += max(own, 1)  # one at a time: progress even on stale numbers
                    continue
                others = slot.load - own
                total += max(own, load.max_running_requests + self._waiting - others)
        return total if seen else math.inf

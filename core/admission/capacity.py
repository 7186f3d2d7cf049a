"""How many requests the engines can take, from the loads they push on their event streams.

Each routable engine (DP rank) that pushes its load offers ``max_running_requests`` plus the
allowed ``engine_waiting``, less the work other routers gave it; one whose KV cache is full
(``active_token_usage``, else ``token_usage``, at ``kv_usage_limit``: the evictable prefix
cache does not count) or whose uncached prefill backlog is over
``waiting_prefill_tokens_limit`` offers only what this router already has on it (at least
one, so that stale numbers cannot stop admission). As a pushed record lags a burst of new
requests, an engine also offers no more requests than fit ``kv_usage_limit`` at the KV share
its running requests took on average when it last ran any. An engine that pushes no load, or
has no running limit, does not limit admission (unbounded).

The same figures place an admitted request: :meth:`EngineCapacity.with_room` narrows a
request's candidates to the engines with a free place, so that the policy does not send it to
an engine whose batch is full (to wait in its queue, for a decode to end there) while another
engine has the place admission counted on.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

from turnout.admission.settings import AdmissionSettings
from turnout.workers.dp import Slot
from turnout.workers.worker import Worker


class EngineCapacity:
    """Requests the engines of ``workers()`` can hold at once right now (call it)."""

    __slots__ = ("_kv_limit", "_per_request", "_prefill_limit", "_waiting", "_workers")

    def __init__(
        self, workers: Callable[[], Iterable[Worker]], settings: AdmissionSettings
    ) -> None:
        self._workers = workers
        self._waiting = settings.engine_waiting
        self._kv_limit = settings.kv_usage_limit
        self._prefill_limit = settings.waiting_prefill_tokens_limit
        #: Per engine (candidate id): the KV share one running request took, last seen.
        self._per_request: dict[str, float] = {}

    def __call__(self) -> float:
        total = 0.0
        seen = False
        for worker in self._workers():
            if not worker.routable:
                continue
            for slot in worker.ranks or (worker,):
                offer = self.offer(slot)
                if math.isinf(offer):
                    return math.inf
                seen = True
                total += offer
        return total if seen else math.inf

    def offer(self, slot: Slot) -> float:
        """The requests of this router ``slot``'s engine can hold now (at least those it
        holds; inf: its load does not limit)."""
        load = slot.engine_load
        if load is None or load.max_running_requests <= 0:
            return math.inf
        own = slot.in_flight
        # The evictable prefix cache is free room: count what cannot be evicted.
        used = load.active_token_usage if load.HasField("active_token_usage") else load.token_usage
        if used >= self._kv_limit or (
            self._prefill_limit and load.waiting_uncached_tokens >= self._prefill_limit
        ):
            return max(own, 1)  # one at a time: progress even on stale numbers
        others = slot.load - own
        room = load.max_running_requests + self._waiting
        per_request = self._share_per_request(slot.id, used, load.running_requests)
        if per_request > 0:
            room = min(room, max(1, math.floor(self._kv_limit / per_request)))
        return max(own, room - others)

    def with_room(self, candidates: list[Slot]) -> list[Slot]:
        """Those of ``candidates`` whose engine has a free place now; all of them when none
        has (the policy then chooses where the request waits)."""
        free = [slot for slot in candidates if self.offer(slot) > slot.in_flight]
        return free if free and len(free) < len(candidates) else candidates

    def _share_per_request(self, engine: str, used: float, running: int) -> float:
        """The KV share of one running request on ``engine`` (0: not seen yet)."""
        known = self._per_request
        if running > 0 and used > 0:
            if len(known) >= _MAX_ENGINES and engine not in known:
                known.clear()  # engines come and go: keep the table bounded
            known[engine] = used / running
            return used / running
        return known.get(engine, 0.0)


#: Engines whose KV share per request is remembered at most.
_MAX_ENGINES = 4096

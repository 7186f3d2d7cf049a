"""``manual`` (alias ``sticky``): a routing key stays on one worker until that worker is gone."""

from __future__ import annotations

import random
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Sequence
from typing import Literal

from turnout.plugins.policies._common import LeastLoaded, check_positive
from turnout.routing.types import Candidate, RoutingRequest

AssignmentMode = Literal["random", "min_load", "min_group"]
_MODES = ("random", "min_load", "min_group")


class ManualPolicy:
    """Pin each routing key to the worker it was first given.

    Unlike consistent hashing, scaling up never moves a key: a key moves only when its worker
    is no longer a candidate (removed, unhealthy or circuit open). New keys are assigned by
    ``assignment_mode``: ``random``, ``min_load`` (least loaded) or ``min_group`` (the worker
    holding the fewest keys). Keys unused for ``max_idle_secs`` are forgotten. Requests without
    a routing key go to the least-loaded worker.
    """

    def __init__(
        self,
        *,
        max_idle_secs: float = 14400,
        assignment_mode: AssignmentMode = "random",
        seed: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        check_positive("max_idle_secs", max_idle_secs)
        if assignment_mode not in _MODES:
            raise ValueError(f"assignment_mode must be one of {_MODES}, got {assignment_mode!r}")
        self.max_idle_secs = float(max_idle_secs)
        self.assignment_mode = assignment_mode
        self._random = random.Random(seed)
        self._clock = clock
        self._least = LeastLoaded()
        # routing key -> (worker id, last use); oldest use first.
        self._keys: OrderedDict[str, tuple[str, float]] = OrderedDict()
        self._group_sizes: Counter[str] = Counter()

    def __len__(self) -> int:
        return len(self._keys)

    def assignment(self, routing_key: str) -> str | None:
        """The worker id ``routing_key`` is pinned to, if any."""
        entry = self._keys.get(routing_key)
        return entry[0] if entry else None

    def on_workers_changed(self, worker_ids: Sequence[str]) -> None:
        """Forget the keys of workers that left."""
        alive = set(worker_ids)
        for key, (worker_id, _) in list(self._keys.items()):
            if worker_id not in alive:
                self._drop(key)

    def select(self, request: RoutingRequest, candidates: Sequence[Candidate]) -> Candidate:
        """Return the key's worker if it is a candidate, else assign one."""
        key = request.routing_key
        if not key:
            return self._least.pick(candidates)
        now = self._clock()
        self._expire(now)
        entry = self._keys.get(key)
        if entry is not None:
            for cand in candidates:
                if cand.id == entry[0]:
                    self._keys[key] = (cand.id, now)
                    self._keys.move_to_end(key)
                    return cand
            self._drop(key)
        chosen = self._assign(candidates)
        self._keys[key] = (chosen.id, now)
        self._group_sizes[chosen.id] += 1
        return chosen

    def _assign(self, candidates: Sequence[Candidate]) -> Candidate:
        if self.assignment_mode == "min_load":
            return self._least.pick(candidates)
        if self.assignment_mode == "min_group":
            sizes = self._group_sizes
            return min(candidates, key=lambda c: (sizes[c.id], c.load))
        return candidates[self._random.randrange(len(candidates))]

    def _drop(self, key: str) -> None:
        worker_id, _ = self._keys.pop(key)
        self._group_sizes[worker_id] -= 1
        if self._group_sizes[worker_id] <= 0:
            del self._group_sizes[worker_id]

    def _expire(self, now: float) -> None:
        cutoff = now - self.max_idle_secs
        keys = self._keys
        while keys:
            key, (_, last) = next(iter(keys.items()))
            if last >= cutoff:
                return
            self._drop(key)

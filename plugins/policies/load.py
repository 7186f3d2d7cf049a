"""Load-based policies: ``power_of_two`` and ``least_load``.

Load is :attr:`Candidate.load`: in-flight requests from this router plus the work the worker
itself reports that did not come from us (pushed on its KV-event stream, else polled
``GetLoads``). Equal loads are told apart by the token work the engines push: queued prompt
tokens that miss the cache (``waiting_uncached_tokens``), then KV-cache use. A request with a
LoRA adapter goes to a worker that served the adapter lately while that one is loaded at most
``adapter_slack`` more than the alternative (:class:`turnout.routing.AdapterAffinity`).
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from turnout.plugins.policies._common import LeastLoaded, check_non_negative, token_work
from turnout.routing.affinity import AdapterAffinity
from turnout.routing.types import Candidate, RoutingRequest

#: How much more loaded a worker that served the request's adapter lately may be, and still win.
DEFAULT_ADAPTER_SLACK = 2.0


class PowerOfTwoPolicy:
    """Sample two distinct candidates at random and take the less loaded one. With a LoRA
    adapter, the first sample is one of the workers that served it lately (if any), and it wins
    unless it is loaded more than ``adapter_slack`` above the other."""

    def __init__(
        self, *, seed: int | None = None, adapter_slack: float = DEFAULT_ADAPTER_SLACK
    ) -> None:
        check_non_negative("adapter_slack", adapter_slack)
        self._random = random.Random(seed)
        self.adapter_slack = float(adapter_slack)
        self.affinity = AdapterAffinity()

    def on_workers_changed(self, worker_ids: Sequence[str]) -> None:
        """Forget the adapters of workers that left."""
        self.affinity.forget(worker_ids)

    def select(self, request: RoutingRequest, candidates: Sequence[Candidate]) -> Candidate:
        """Return the lower-loaded of two random candidates (a random one on a tie)."""
        n = len(candidates)
        if n == 1:
            chosen = candidates[0]
        elif request.adapter is not None:
            chosen = self._with_affinity(request.adapter, candidates)
        else:
            i = self._random.randrange(n)
            j = self._random.randrange(n - 1)
            if j >= i:
                j += 1
            a, b = candidates[i], candidates[j]
            a_load, b_load = a.load, b.load
            if a_load == b_load:
                return b if token_work(b) < token_work(a) else a
            return b if b_load < a_load else a
        self.affinity.record(request.adapter, chosen.id)
        return chosen

    def _with_affinity(self, adapter: str, candidates: Sequence[Candidate]) -> Candidate:
        rand = self._random
        warm = self.affinity.warm(adapter, candidates)
        a = warm[rand.randrange(len(warm))] if warm else candidates[rand.randrange(len(candidates))]
        i = candidates.index(a)
        j = rand.randrange(len(candidates) - 1)
        if j >= i:
            j += 1
        b = candidates[j]
        slack = self.adapter_slack if warm else 0.0
        return b if b.load + slack < a.load else a


class LeastLoadPolicy:
    """Always take the least-loaded candidate; equal loads are served in turn. With a LoRA
    adapter, the least-loaded of the workers that served it lately wins while it is loaded at
    most ``adapter_slack`` more than the least-loaded worker."""

    def __init__(self, *, adapter_slack: float = DEFAULT_ADAPTER_SLACK) -> None:
        check_non_negative("adapter_slack", adapter_slack)
        self._least = LeastLoaded()
        self.adapter_slack = float(adapter_slack)
        self.affinity = AdapterAffinity()

    def on_workers_changed(self, worker_ids: Sequence[str]) -> None:
        """Forget the adapters of workers that left."""
        self.affinity.forget(worker_ids)

    def select(self, request: RoutingRequest, candidates: Sequence[Candidate]) -> Candidate:
        """Return a candidate with the minimum load."""
        if request.adapter is None:
            return self._least.pick(candidates)
        return self.affinity.choose(request, candidates, self._least.pick, self.adapter_slack)

"""Load-based policies: ``power_of_two`` and ``least_load``.

Load is :attr:`Candidate.load`: in-flight requests from this router plus the work the worker
itself reports (polled ``GetLoads``) that did not come from us.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from turnout.plugins.policies._common import LeastLoaded
from turnout.routing.types import Candidate, RoutingRequest


class PowerOfTwoPolicy:
    """Sample two distinct candidates at random and take the less loaded one."""

    def __init__(self, *, seed: int | None = None) -> None:
        self._random = random.Random(seed)

    def select(self, request: RoutingRequest, candidates: Sequence[Candidate]) -> Candidate:
        """Return the lower-loaded of two random candidates (a random one on a tie)."""
        n = len(candidates)
        if n == 1:
            return candidates[0]
        i = self._random.randrange(n)
        j = self._random.randrange(n - 1)
        if j >= i:
            j += 1
        a, b = candidates[i], candidates[j]
        return b if b.load < a.load else a


class LeastLoadPolicy:
    """Always take the least-loaded candidate; equal loads are served in turn."""

    def __init__(self) -> None:
        self._least = LeastLoaded()

    def select(self, request: RoutingRequest, candidates: Sequence[Candidate]) -> Candidate:
        """Return a candidate with the minimum load."""
        return self._least.pick(candidates)
